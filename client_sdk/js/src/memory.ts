/** A bounded least-recently-used map: what the manager remembers of refs and histories. */

export class LruMap<K, V> {
  private readonly map = new Map<K, V>();

  constructor(readonly limit: number) {}

  get size(): number {
    return this.map.size;
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  get(key: K): V | undefined {
    return this.map.get(key);
  }

  /** Set `key` (now the most recently used) and drop the least recently used over the limit. */
  set(key: K, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.limit) this.map.delete(this.map.keys().next().value as K);
  }

  delete(key: K): boolean {
    return this.map.delete(key);
  }

  entries(): [K, V][] {
    return [...this.map.entries()];
  }
}
