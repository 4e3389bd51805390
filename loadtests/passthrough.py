"""The floor of the gateway-speed bench: a minimal HTTP/1.1 pass-through proxy on asyncio
streams (no framework, no HTTP library), one upstream connection per client connection.

It forwards each request's head and body as they came and the answer's head and body back,
framed by `Content-Length` only (what the bench's clients and fake upstream send). What is
left is what any Python proxy pays: the event loop, two sockets, a head parsed each way.

    python -m loadtests.passthrough --port 8791 --upstream 127.0.0.1:8790
"""

from __future__ import annotations

import argparse
import asyncio
import re

_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)


async def _message(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    found = _LENGTH.search(head)
    return head + (await reader.readexactly(int(found.group(1))) if found else b"")


async def handle(
    host: str, port: int, client: asyncio.StreamReader, out: asyncio.StreamWriter
) -> None:
    upstream = await asyncio.open_connection(host, port, limit=1 << 20)
    try:
        while True:
            upstream[1].write(await _message(client))
            out.write(await _message(upstream[0]))
            await out.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        upstream[1].close()
        out.close()


async def serve(port: int, upstream: str) -> None:
    host, _, number = upstream.rpartition(":")
    server = await asyncio.start_server(
        lambda r, w: handle(host, int(number), r, w), "127.0.0.1", port, limit=1 << 20, backlog=512
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the upstream")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.upstream))


if __name__ == "__main__":
    main()
