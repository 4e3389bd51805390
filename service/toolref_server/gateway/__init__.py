"""The gateway: `/llm/{name}/{path}` hydrated in process and forwarded to an upstream LLM
API (`gateway.Gateway`), its upstreams, connection pool, limits and the registry port it
hydrates through (`inprocess`)."""
