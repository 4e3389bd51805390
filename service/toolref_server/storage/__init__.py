"""Storage: the only code that names a Redis key (every key spelled in `keys`). Records,
histories and their cache, summaries with their locks, quotas and counters kept in Redis,
the keyspace an export walks, zstd contexts, and opening the Redis client."""
