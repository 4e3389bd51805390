// Bytes for a person, as every size toolref shows: binary units (1 KiB = 1024 bytes), one
// decimal, a half rounded up. Plain JavaScript with its types in sizes.d.ts, so that node
// runs it as it is: tests/integration/test_sizes.py holds it to the relay's
// `toolref_relay.ledger.size`, the Python home of this convention, on the same numbers
// (tenths counted as an integer, so that both round alike).
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function formatBytes(bytes) {
  let value = bytes;
  let unit = 0;
  while (unit < UNITS.length - 1 && Math.floor(value * 10 + 0.5) >= 10240) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) return `${bytes} B`;
  const tenths = Math.floor(value * 10 + 0.5);
  return `${Math.floor(tenths / 10)}.${tenths % 10} ${UNITS[unit]}`;
}
