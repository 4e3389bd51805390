"""The registry's domain: conversations (read, registered, filled), the hydrate steps,
continuing a history, summary mode and the summaries it keeps, model calls and their
quotas. Called by the routes and, in process, by the gateway; depends on `storage`."""
