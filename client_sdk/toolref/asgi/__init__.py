"""The ASGI plumbing the relay, the middleware and the gateway share: a request's headers
and body as an ASGI server hands them over (`scope`), headers across a proxy hop (`hops`),
the budget of body bytes in flight (`budget`), work in a thread when large (`workers`).
A sender (the relay) and a receiver (the middleware, the gateway) alike import it. `paced`
(uvicorn's WebSocket protocol with its writes bounded: the relay's and the service's) and
`upgrade` (uvicorn's h11 protocol, a WebSocket upgrade only for a GET: the relay's, and the
service's under its deadlines) need uvicorn, which only the relay and the service install."""
