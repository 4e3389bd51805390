"""The receiving side: what a backend does with a protocol-2 request before its app sees
it (`hydrator`, `middleware.ToolRefMiddleware`), the ASGI plumbing both it and the relay
use (`asgi_io`, `hops`), and the memory it keeps bounded (`recent`, `budget`)."""
