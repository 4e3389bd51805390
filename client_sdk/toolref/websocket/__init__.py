"""A WebSocket client written once: the sans-I/O protocol (`client`: a handshake, messages
in and out over wsproto, no I/O and no clock) and its asyncio driver (`driver`: a socket,
timeouts). The relay opens its socket to the gateway with it, the gateway its socket to a
provider."""
