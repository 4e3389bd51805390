"""The registry as its callers see it: the HTTP client, its sans-I/O exchanges and breaker, and
the port a hydrator calls through (`port`)."""
