"""ferry's exceptions, one family per kind of operation.

Every exception ferry raises is a :class:`FerryError`. Timeouts are also
built-in :class:`TimeoutError`\\ s, and a dead peer on a send is also a
:class:`BrokenPipeError`, so generic handlers work too.
"""

import builtins


class FerryError(Exception):
    """Base of every error ferry raises."""


class Timeout(FerryError, builtins.TimeoutError):
    """A blocking operation's timeout expired."""


# Sending ----------------------------------------------------------------

class SendError(FerryError):
    """A send failed; the message's rights and regions were released."""


class PeerDead(SendError, builtins.BrokenPipeError):
    """The port's receive right is gone (a dead name)."""


class QueueFull(SendError):
    """The port's queue is full and the timeout was zero."""


class SendTimeout(SendError, Timeout):
    """The port's queue stayed full until the timeout."""


class MessageTooLarge(SendError):
    """The message breaks a limit of the wire format (inline bytes, items,
    descriptors); send large data in a region."""


class InvalidSend(SendError):
    """A send-once right already used, or a receive right sent to itself."""


# Receiving --------------------------------------------------------------

class RecvError(FerryError):
    """A receive failed."""


class NoSenders(RecvError):
    """Every send right to the port is gone and its queue is empty."""


class SendOnceDropped(RecvError):
    """A send-once right to the port was destroyed unused."""


class RecvTimeout(RecvError, Timeout):
    """Nothing arrived before the timeout."""


class WireError(FerryError):
    """A malformed message: it was discarded and every descriptor it carried
    was closed."""


class BadMessage(RecvError, WireError):
    """A malformed message arrived and was discarded; the port stays
    usable."""


# Regions ----------------------------------------------------------------

class RegionError(FerryError):
    """A region could not be allocated, sealed, mapped or read."""


class SenderMayWrite(RegionError):
    """The region was lent or shared: its sender can still change it. Map
    with ``copy_out()``: ferry never hands out a view of memory another
    process can still change."""


class AddressTaken(RegionError):
    """Same-address placement found the sender's range in use here."""


# Names ------------------------------------------------------------------

class NameError(FerryError):  # noqa: A001 - ferry.NameError, as in Rust
    """A name-service request failed."""


class NameNotFound(NameError, builtins.LookupError):
    """No live registration under that name for this user."""


class NameTaken(NameError):
    """The name is registered to a live port already."""


class InvalidName(NameError, builtins.ValueError):
    """Empty, longer than 255 bytes, or holding control characters or
    invisible characters that reorder or hide text."""


class NameDenied(NameError, builtins.PermissionError):
    """Another user's registration, or a request the caller may not make."""


class NameServiceUnavailable(NameError):
    """No name server answered, and none could be started here."""


class NameLimitReached(NameError):
    """A per-user budget of the name server (names, connections) is used
    up; the message says which and its limit."""


class NameServiceUntrusted(NameError, builtins.PermissionError):
    """The socket found at the name service's path belongs to another user
    (an impostor), or its directory is not private to this user: ferry
    refuses to hand rights to it."""


# RPC --------------------------------------------------------------------

class RpcError(FerryError):
    """A call or a reply-and-wait failed."""


class RpcPeerDead(RpcError, builtins.BrokenPipeError):
    """The other side of the connection is gone; reconnect."""


class RpcTimeout(RpcError, Timeout):
    """No reply (or request) before the timeout."""


class NoClients(RpcError):
    """The server has no connections and no port to accept new ones."""


__all__ = [
    "FerryError",
    "Timeout",
    "SendError",
    "PeerDead",
    "QueueFull",
    "SendTimeout",
    "MessageTooLarge",
    "InvalidSend",
    "RecvError",
    "NoSenders",
    "SendOnceDropped",
    "RecvTimeout",
    "WireError",
    "BadMessage",
    "RegionError",
    "SenderMayWrite",
    "AddressTaken",
    "NameError",
    "NameNotFound",
    "NameTaken",
    "InvalidName",
    "NameDenied",
    "NameServiceUnavailable",
    "NameLimitReached",
    "NameServiceUntrusted",
    "RpcError",
    "RpcPeerDead",
    "RpcTimeout",
    "NoClients",
]
