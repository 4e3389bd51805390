/** `bytes` for a person: `999 B`, `86.0 KiB`, `1.1 MiB` (units of 1024, one decimal). */
export function formatBytes(bytes: number): string;
