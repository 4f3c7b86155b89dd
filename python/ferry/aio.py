"""``asyncio`` integration: await a message on a port or an event on a port
set without blocking the event loop.

Both helpers try the non-blocking call first, then wait on the handle's
``fileno()`` with ``loop.add_reader`` and try again; the descriptor is asked
for anew each time, so send-once rights made meanwhile are seen. Several
tasks may await the same port or port set: each message goes to one of
them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .errors import RecvTimeout, RpcTimeout

if TYPE_CHECKING:  # pragma: no cover
    from ._ferry import ConnId, Event, Message, PortSet, ReceiveRight, ReplyReceiver, RpcServer


#: The tasks waiting for each descriptor to poll readable, by loop.
_waiting: dict[tuple[asyncio.AbstractEventLoop, int], list[asyncio.Future[None]]] = {}


async def _readable(fd: int) -> None:
    """Waits until ``fd`` polls readable. A loop keeps one reader per
    descriptor (``add_reader`` replaces the one before), so the tasks
    waiting on the same port or port set share it: each readiness wakes
    them all, and each tries again."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    key = (loop, fd)
    waiters = _waiting.get(key)
    if waiters is None:
        waiters = _waiting[key] = []

        def ready() -> None:
            loop.remove_reader(fd)
            for f in _waiting.pop(key, []):
                if not f.done():
                    f.set_result(None)

        loop.add_reader(fd, ready)
    waiters.append(fut)
    try:
        await fut
    finally:
        # Given up (a timeout, a cancellation): the last one to go takes
        # the reader away.
        left = _waiting.get(key)
        if left is not None and fut in left:
            left.remove(fut)
            if not left:
                del _waiting[key]
                loop.remove_reader(fd)


async def recv_async(port: "ReceiveRight | ReplyReceiver", timeout: float | None = None) -> "Message":
    """Receives the next message on ``port`` (a receive right, or the
    reply receiver of ``reply_pair()``) without blocking the event loop.
    Raises what its ``recv`` raises; ``timeout`` (seconds) raises
    ``RecvTimeout``."""

    async def loop() -> "Message":
        while True:
            try:
                return port.try_recv()
            except RecvTimeout:
                pass
            await _readable(port.fileno())

    if timeout is None:
        return await loop()
    try:
        return await asyncio.wait_for(loop(), timeout)
    except asyncio.TimeoutError:
        raise RecvTimeout(f"no message within {timeout} s") from None


async def reply_and_wait_async(
    server: "RpcServer", reply: "tuple[ConnId, Message] | None" = None, timeout: float | None = None
) -> "tuple[ConnId, Message]":
    """Sends ``reply`` (a ``(conn, message)`` pair, or ``None``) and awaits
    the next request of an ``RpcServer`` without blocking the event loop;
    returns ``(conn, request)``. The reply is sent first, before any
    wait. Raises what ``reply_and_wait`` raises; ``timeout`` (seconds)
    raises ``RpcTimeout``."""
    try:
        return server.reply_and_wait(reply, 0)
    except RpcTimeout:
        pass

    async def loop() -> "tuple[ConnId, Message]":
        while True:
            await _readable(server.fileno())
            try:
                return server.reply_and_wait(None, 0)
            except RpcTimeout:
                pass

    if timeout is None:
        return await loop()
    try:
        return await asyncio.wait_for(loop(), timeout)
    except asyncio.TimeoutError:
        raise RpcTimeout(f"no request within {timeout} s") from None


async def wait_async(portset: "PortSet", timeout: float | None = None) -> "Event":
    """Waits for the next event of ``portset`` without blocking the event
    loop."""

    async def loop() -> "Event":
        while True:
            try:
                return portset.wait(0)
            except RecvTimeout:
                pass
            await _readable(portset.fileno())

    if timeout is None:
        return await loop()
    try:
        return await asyncio.wait_for(loop(), timeout)
    except asyncio.TimeoutError:
        raise RecvTimeout(f"no event within {timeout} s") from None
