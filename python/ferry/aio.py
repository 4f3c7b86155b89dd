"""``asyncio`` integration: await a message on a port, an event on a port
set, a request on an RPC server, or an RPC client's connection and calls,
without blocking the event loop.

Every helper tries the non-blocking call first, then waits on the handle's
``fileno()`` with ``loop.add_reader`` and tries again; the descriptor is asked
for anew each time, so send-once rights made meanwhile are seen. A wait
lasts at most 200 ms before the helper tries again, so a handle closed
under a waiting task ends its wait with ``ValueError``. Several
tasks may await the same port or port set: each message goes to one of
them. Calls on one connection are made one at a time, in the order they
were awaited.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import TYPE_CHECKING

from ._ferry import Connecting
from .errors import RecvTimeout, RpcTimeout

if TYPE_CHECKING:  # pragma: no cover
    from ._ferry import ConnId, Connection, Event, Message, PortSet, ReceiveRight, ReplyReceiver, RpcServer, SendRight, _Policy


#: Longest a helper waits on a descriptor before it tries its handle
#: again. A handle closed meanwhile (by another task or thread) leaves the
#: duplicate a wait watches with nothing that will ever make it ready; the
#: next try raises ``ValueError``, as a blocking call's next slice does.
_SLICE = 0.2

#: How long ``call_async`` waits before it tries again to send on a
#: connection that a blocking call of another thread holds (there is no
#: descriptor that tells when that call ends).
_BUSY = 0.01


async def _ready(fd: int, writable: bool = False) -> None:
    """Waits until ``fd`` polls readable (or ``writable``), or for at most
    ``_SLICE`` seconds; the caller tries again either way. The loop watches
    a duplicate of ``fd`` made for this wait alone: a loop keeps one reader
    per descriptor number, and a handle closed while a task waited on its
    own number would leave the loop watching that number after the kernel
    stopped (closing a descriptor takes it out of every ``epoll`` set), so
    a later handle given the same number would never be heard. The
    duplicate's number stays taken until the wait ends. Tasks waiting on
    the same handle each have their own, and each readiness wakes them
    all; each tries again."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    own = os.dup(fd)
    add, remove = (loop.add_writer, loop.remove_writer) if writable else (loop.add_reader, loop.remove_reader)

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    slice_over = loop.call_later(_SLICE, ready)
    try:
        add(own, ready)
        await fut
    finally:
        slice_over.cancel()
        remove(own)
        os.close(own)


async def _readable(fd: int) -> None:
    """Waits until ``fd`` polls readable (see ``_ready``)."""
    await _ready(fd)


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


async def connect_async(server: "SendRight", policy: "_Policy" = "adaptive", timeout: float | None = None) -> "Connection":
    """Opens a ``Connection`` to the RPC server whose port ``server`` names
    without blocking the event loop (the server may be served by this very
    loop, with ``reply_and_wait_async``). Raises what ``Connection(server,
    policy, timeout)`` raises; ``timeout`` (seconds) raises ``RpcTimeout``.
    The handle ``server`` stays the caller's."""
    connecting = Connecting(server, policy)

    async def loop() -> "Connection":
        while True:
            try:
                return connecting.try_open()
            except RpcTimeout:
                pass
            if connecting.request_sent:
                await _ready(connecting.fileno())
            else:
                await _ready(server.fileno(), writable=True)  # the server's port is full

    if timeout is None:
        return await loop()
    try:
        return await asyncio.wait_for(loop(), timeout)
    except asyncio.TimeoutError:
        raise RpcTimeout(f"the server did not accept within {timeout} s") from None


#: One lock per event loop and connection: a connection's calls are made
#: one at a time (a request sent while another call waits would abandon
#: that call). An ``asyncio.Lock`` belongs to the first loop that waits on
#: it, so each loop that meets the connection (``asyncio.run`` after
#: ``asyncio.run``) has its own.
_call_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakKeyDictionary[Connection, asyncio.Lock]]" = weakref.WeakKeyDictionary()


async def call_async(conn: "Connection", request: "Message", timeout: float | None = None) -> "Message":
    """Sends ``request`` on ``conn`` and awaits the reply without blocking
    the event loop, as ``conn.call(request, timeout)`` does blocking.
    Raises ``RpcTimeout`` (``timeout``, in seconds, counts from the call,
    waiting for an earlier call on the same connection included; a later
    reply is discarded) or ``RpcPeerDead``. Tasks of one event loop calling
    on one connection take turns, in each loop the connection meets (one
    ``asyncio.run`` after another); loops running at once in several
    threads need a connection each. A call cancelled after its request was sent is abandoned
    as after a timeout: the server still answers it, and the next call
    discards that reply."""
    locks = _call_locks.get(asyncio.get_running_loop())
    if locks is None:
        locks = _call_locks[asyncio.get_running_loop()] = weakref.WeakKeyDictionary()
    lock = locks.get(conn)
    if lock is None:
        lock = locks[conn] = asyncio.Lock()

    async def call() -> "Message":
        async with lock:
            # A blocking call of another thread holds the connection from
            # its request to its reply: wait for it without blocking the
            # loop.
            while (pending := conn.try_send_request(request)) is None:
                await asyncio.sleep(_BUSY)
            while True:
                try:
                    return conn.try_reply(pending)
                except RpcTimeout:
                    pass
                await _ready(pending.fileno())

    if timeout is None:
        return await call()
    try:
        return await asyncio.wait_for(call(), timeout)
    except asyncio.TimeoutError:
        raise RpcTimeout(f"no reply within {timeout} s") from None
