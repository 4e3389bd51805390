import { formatBytes } from "./sizes";
import type { Turn } from "./turns";

// Per turn: what the request would have put on the wire (raw) and what it did (wire).
export function Savings({ turns }: { turns: Turn[] }) {
  const raw = turns.reduce((sum, t) => sum + t.rawBytes, 0);
  const wire = turns.reduce((sum, t) => sum + t.wireBytes, 0);
  const ratio = wire > 0 ? raw / wire : 1;
  return (
    <aside className="savings">
      <h2>Bytes uploaded</h2>
      <p className="totals" data-raw={raw} data-wire={wire}>
        {formatBytes(wire)} sent for {formatBytes(raw)} of messages:{" "}
        <strong>{ratio.toFixed(1)}x fewer</strong>
      </p>
      <table>
        <thead>
          <tr>
            <th>turn</th>
            <th>raw</th>
            <th>wire</th>
            <th>saved</th>
          </tr>
        </thead>
        <tbody>
          {turns.map((t) => (
            <tr key={t.turn} data-turn={t.turn} data-raw={t.rawBytes} data-wire={t.wireBytes}>
              <td>
                {t.turn}
                {t.continued ? " ⟲" : ""}
                {t.resent ? " ↻" : ""}
              </td>
              <td>{formatBytes(t.rawBytes)}</td>
              <td>{formatBytes(t.wireBytes)}</td>
              <td>{t.rawBytes > 0 ? `${(100 * (1 - t.wireBytes / t.rawBytes)).toFixed(0)}%` : ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p className="legend">⟲ sent as an edit of the request the backend kept: only what changed · ↻ sent again after the backend lacked what the edit named</p>
    </aside>
  );
}
