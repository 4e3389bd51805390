"""A TCP proxy that delays every byte by a fixed time each way: a store (or any server) a
round trip away, on loopback. Bytes keep their order; each chunk read is written
`--delay-ms` after it was read (a one-way delay: a round trip costs twice it), with no
bandwidth limit. For `loadtests.turns_ab --store-delay`.

    python -m loadtests.delay_proxy --port 6390 --to 127.0.0.1:6379 --delay-ms 0.5
"""

from __future__ import annotations

import argparse
import asyncio


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while chunk := await reader.read(1 << 16):
            loop.call_later(delay, writer.write, chunk)  # the order kept: same delay each
            if writer.transport.get_write_buffer_size() > 1 << 22:
                await writer.drain()
    except ConnectionError:
        pass
    finally:
        loop.call_later(delay, writer.close)


async def _handle(
    host: str, port: int, delay: float, client: asyncio.StreamReader, out: asyncio.StreamWriter
) -> None:
    upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
    await asyncio.gather(_pipe(client, upstream_writer, delay), _pipe(upstream_reader, out, delay))


async def serve(port: int, to: str, delay_ms: float) -> None:
    host, _, number = to.rpartition(":")
    delay = delay_ms / 1000

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _handle(host, int(number), delay, reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--to", required=True, help="HOST:PORT of the server behind")
    parser.add_argument("--delay-ms", type=float, required=True, help="one way, per chunk")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.to, args.delay_ms))


if __name__ == "__main__":
    main()
