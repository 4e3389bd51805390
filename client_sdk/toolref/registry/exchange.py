"""Sans-I/O exchanges: the SDK's HTTP logic written once, run by a sync or an async driver.

An exchange is a generator that yields what it needs done (send this `httpx.Request`, or
sleep this long) and receives the outcome (the `httpx.Response`, or the transport error
thrown into it). Retries, backoff, negotiation and fallback all live in the generator; the
drivers only do the I/O, so sync and async behave identically by construction.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TypeVar

import httpx

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


Step = httpx.Request | Sleep
Exchange = Generator[Step, httpx.Response | None, T]


def run_sync(exchange: Exchange[T], send: Callable[[httpx.Request], httpx.Response]) -> T:
    """Drive an exchange with blocking I/O."""
    try:
        step = next(exchange)
        while True:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                step = exchange.send(None)
                continue
            try:
                response = send(step)
            except httpx.TransportError as exc:
                step = exchange.throw(exc)
                continue
            step = exchange.send(response)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def run_async(
    exchange: Exchange[T], send: Callable[[httpx.Request], Awaitable[httpx.Response]]
) -> T:
    """Drive an exchange with asyncio I/O."""
    try:
        step = next(exchange)
        while True:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                step = exchange.send(None)
                continue
            try:
                response = await send(step)
            except httpx.TransportError as exc:
                step = exchange.throw(exc)
                continue
            step = exchange.send(response)
    except StopIteration as stop:
        result: T = stop.value
        return result
