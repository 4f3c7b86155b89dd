"""ferry: message-passing IPC for Linux.

Processes talk through **ports**, kernel-protected message queues named by
unforgeable **rights** (receive, send, send-once) that travel inside
messages. A message is **by value**: an operation id, inline bytes, rights,
and out-of-line memory regions of any size. A NumPy array travels by value
without a copy::

    region = ferry.Region(nbytes)
    a = ferry.ndarray(region, "f8", shape)     # writable, over the region
    a[:] = ...
    to_peer.send(ferry.Message(1).add(region)) # sealed: copy-on-write

    m = port.recv()
    mapped = m.items[0].map()
    b = ferry.ndarray(mapped, "f8", shape)     # read-only, no copy

See ``docs/python.md`` for the tour.
"""

from __future__ import annotations

from ._ferry import (
    MAX_INLINE,
    MAX_ITEMS,
    SERVICE_PORT,
    Bootstrap,
    ConnId,
    Connecting,
    Connection,
    Event,
    MappedRegion,
    Message,
    PortSet,
    ReceiveRight,
    Region,
    RegionItem,
    ReplyReceiver,
    PendingCall,
    RpcServer,
    SendOnceRight,
    SendRight,
    counters,
    port,
    reply_pair,
)
from .aio import call_async, connect_async, recv_async, reply_and_wait_async, wait_async
from .errors import *  # noqa: F401,F403
from .errors import NameError  # noqa: A004 - ferry.NameError, as in Rust
from .errors import __all__ as _errors_all
from .arrays import ndarray

__all__ = [
    "MAX_INLINE",
    "MAX_ITEMS",
    "SERVICE_PORT",
    "Bootstrap",
    "ConnId",
    "Connecting",
    "Connection",
    "Event",
    "MappedRegion",
    "Message",
    "PendingCall",
    "PortSet",
    "ReceiveRight",
    "Region",
    "RegionItem",
    "ReplyReceiver",
    "RpcServer",
    "SendOnceRight",
    "SendRight",
    "call_async",
    "connect_async",
    "counters",
    "ndarray",
    "port",
    "recv_async",
    "reply_and_wait_async",
    "reply_pair",
    "wait_async",
    # `from ferry import *` must not shadow the built-in NameError.
    *(name for name in _errors_all if name != "NameError"),
]
