"""Storage: the only code that names a Redis key. Records, histories and their cache,
summaries, quotas kept in Redis, zstd contexts, and opening the Redis client."""
