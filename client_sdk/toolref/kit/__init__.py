"""The pure kit: JSON text spans, tool payloads and kinds, summary placeholders and the
extractive summarizer, the one bounded LRU, the circuit breaker, option checks and counters
(docs/architecture.md)."""
