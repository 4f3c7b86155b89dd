"""Typed interfaces in Python, built at run time from the language-neutral
description that ``ferry-idl`` emits (``describe()`` in Rust; ``docs/interfaces.md``).

``load(description)`` gives an :class:`Interface` whose

* ``client(to)`` is a typed proxy over a :class:`ferry.SendRight` (calls go
  through the port, each with a send-once reply right) or a
  :class:`ferry.Connection` (the RPC fast path): one method per operation,
  arguments checked against their declared types before anything is sent,
  the reply checked before a value is returned;
* ``serve_port(impl, port)`` and ``serve_rpc(impl, server)`` run a
  dispatcher over an object with one method per operation: every argument
  of a request is decoded and checked first (validate, then act); a request
  that does not match is answered with a ``BadRequest`` fault and never
  reaches ``impl``; an unknown operation gets ``UnknownOperation``.

The wire format is the Rust stubs' (``crates/ferry-idl/src/codec.rs``), so
either side may be Rust, C or Python. Values in Python: integers, floats,
``bool``, ``str``, ``bytes`` (``bytes`` and fixed arrays), ``list``, ``None``
for an absent optional, a record as an instance of the interface's record
class (a named tuple: ``iface.types["Entry"](key=..., len=...)``; a ``dict``
is accepted too), an enumeration value as :class:`Variant`, rights as
ferry's right objects, a region as :class:`ferry.Region` (sent by copy) or
a received :class:`ferry.RegionItem`. A typed error is raised on the client
as :class:`ErrorReply` and raised by a server implementation the same way.

Why built at run time rather than generated ``.py`` files: the description
is data the Rust build already produces, so a Python program needs no build
step and cannot run stubs older than the description it loaded; the checks
are the same either way.
"""

from __future__ import annotations

import collections
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable

from . import _ferry
from .errors import FerryError

OP_HELLO = 0
#: The bit of an operation id that marks an answer. Every reply carries it
#: and no request may: a server drops a message whose id has it without
#: running or answering anything, so an answer a client sent on to another
#: server (naming that server's port as its reply right) is never taken
#: there as a request of whoever sent the answer.
ANSWER = 1 << 31
REPLY_OK = ANSWER
REPLY_ERR = ANSWER | 1
REPLY_FAULT = ANSWER | 2
#: How deeply records may nest in one message (as in Rust).
MAX_DEPTH = 32

_SCALARS: dict[str, tuple[str, int]] = {
    "u8": ("<B", 1),
    "u16": ("<H", 2),
    "u32": ("<I", 4),
    "u64": ("<Q", 8),
    "i8": ("<b", 1),
    "i16": ("<h", 2),
    "i32": ("<i", 4),
    "i64": ("<q", 8),
    "f32": ("<f", 4),
    "f64": ("<d", 8),
}


class IdlError(FerryError):
    """A typed call failed for a reason of the interface layer."""


class DecodeError(IdlError):
    """Bytes or items did not decode as the declared type."""


class BadReply(IdlError):
    """The server's reply does not decode as the operation's result."""


class UnexpectedReply(IdlError):
    """The reply's operation id is none of OK, ERR, FAULT."""


class Incompatible(IdlError):
    """The version check at connect failed (other interface, too old)."""


class Fault(IdlError):
    """The server refused the request; the implementation did not run.
    ``code`` is 1 (unknown operation), 2 (bad request), 3 (incompatible)
    or 4 (reply too large); ``text`` says more."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"fault {code}: {text}")
        self.code = code
        self.text = text


class UnknownOperation(Fault):
    """The server has no such operation."""


class BadRequest(Fault):
    """The request did not match the interface."""


class IncompatibleFault(Fault, Incompatible):
    """The server refused this client's version or interface."""


class ReplyTooLarge(Fault):
    """The server could not send its reply."""


_FAULTS: dict[int, type[Fault]] = {1: UnknownOperation, 2: BadRequest, 3: IncompatibleFault, 4: ReplyTooLarge}


@dataclass(frozen=True)
class Variant:
    """A value of an enumeration: the variant's name and its payload (None
    for a variant without one)."""

    name: str
    payload: Any = None


class ErrorReply(IdlError):
    """An operation's typed error: raised by a client when the server
    answered with it, and by a server implementation to answer with it."""

    def __init__(self, error: Variant) -> None:
        super().__init__(f"{error.name}" + ("" if error.payload is None else f"({error.payload!r})"))
        self.error = error


# Encoding ------------------------------------------------------------------


class _Enc:
    def __init__(self) -> None:
        self.body = bytearray()
        self.items: list[Any] = []

    def item(self, it: Any) -> None:
        self.body += struct.pack("<I", len(self.items))
        self.items.append(it)

    def message(self, op: int) -> _ferry.Message:
        m = _ferry.Message(op, bytes(self.body))
        for it in self.items:
            m.add(it)
        return m


class _Dec:
    def __init__(self, body: bytes, items: list[Any]) -> None:
        self.buf = memoryview(body)
        self.pos = 0
        self.end = len(body)
        self.depth = 0
        self.items: list[Any] = list(items)
        self.claimed = [False] * len(items)

    def left(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise DecodeError(f"truncated: a value needs {n} bytes, {self.left()} are left")
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def u32(self) -> int:
        v: int = struct.unpack("<I", self.take(4))[0]
        return v

    def count(self, min_size: int) -> int:
        n = self.u32()
        fits = n <= _ferry.MAX_INLINE if min_size == 0 else n * min_size <= self.left()
        if not fits:
            raise DecodeError(f"a count of {n} exceeds what the message holds")
        return n

    def item(self) -> tuple[int, Any]:
        i = self.u32()
        if i >= len(self.items):
            raise DecodeError(f"item {i} does not exist")
        if self.claimed[i]:
            raise DecodeError(f"item {i} is claimed twice")
        self.claimed[i] = True
        return i, self.items[i]

    def within(self, n: int, f: Callable[[], Any]) -> Any:
        if n > self.left():
            raise DecodeError(f"truncated: a value needs {n} bytes, {self.left()} are left")
        outer, self.end = self.end, self.pos + n
        v = f()
        if self.pos != self.end:
            raise DecodeError(f"{self.end - self.pos} bytes left over after the value")
        self.end = outer
        return v

    def finish(self) -> None:
        if self.pos != len(self.buf):
            raise DecodeError(f"{len(self.buf) - self.pos} bytes left over after the value")
        left = self.claimed.count(False)
        if left:
            raise DecodeError(f"{left} items are claimed by no value")


def _min_size(t: Any) -> int:
    if isinstance(t, str):
        if t in _SCALARS:
            return _SCALARS[t][1]
        return {"bool": 1, "unit": 0, "string": 4, "bytes": 4}.get(t, 1)
    if "array" in t:
        return int(t["len"])
    if "list" in t or "record" in t or "enum" in t:
        return 4
    if "optional" in t:
        return 1
    return 4  # rights and regions: an item index


class Interface:
    """An interface loaded from its description: its operations, its record
    classes (``types``), clients and dispatchers."""

    def __init__(self, description: dict[str, Any]) -> None:
        d = description.get("description", description)
        self.description = d
        self.name: str = d["interface"]
        self.version: int = int(d["version"])
        self.compatible: int = int(d["compatible"])
        self.doc: str = d.get("doc", "")
        self.operations: dict[str, dict[str, Any]] = {}
        self.by_ordinal: dict[int, dict[str, Any]] = {}
        self.types: dict[str, Any] = {}
        self._records: dict[str, Any] = {}
        self._collect(_HELLO)
        for op in d["operations"]:
            if op["ordinal"] == OP_HELLO or op["ordinal"] & ANSWER or op["ordinal"] in self.by_ordinal or op["name"] in self.operations:
                raise ValueError(f"{self.name}: operation {op['name']} has a bad or repeated ordinal {op['ordinal']}")
            self.operations[op["name"]] = op
            self.by_ordinal[int(op["ordinal"])] = op
            for a in op["args"]:
                self._collect(a["type"])
            self._collect(op["result"])
            if op.get("error") is not None:
                self._collect(op["error"])

    def _collect(self, t: Any) -> None:
        """Makes a named-tuple class for every record the description uses."""
        if not isinstance(t, dict):
            return
        if "record" in t:
            if t["record"] not in self.types:
                self.types[t["record"]] = collections.namedtuple(t["record"], [f["name"] for f in t["fields"]])
                self._records[t["record"]] = t
                for f in t["fields"]:
                    self._collect(f["type"])
            elif self._records[t["record"]] != t:
                # Its values would be made into the other record's class.
                raise ValueError(f"{self.name}: two different records are named {t['record']}; rename one")
        for key in ("list", "optional"):
            if key in t:
                self._collect(t[key])
        if "enum" in t:
            for v in t["variants"]:
                self._collect(v.get("payload"))

    # Values ------------------------------------------------------------

    def encode(self, t: Any, v: Any, enc: _Enc) -> None:
        """Writes value ``v`` of type ``t``, checking it is of that type."""
        if isinstance(t, str):
            if t in _SCALARS:
                fmt, _ = _SCALARS[t]
                if t[0] == "f":
                    if not isinstance(v, (int, float)) or isinstance(v, bool):
                        raise TypeError(f"{v!r} is not a {t}")
                else:
                    if not isinstance(v, int) or isinstance(v, bool):
                        raise TypeError(f"{v!r} is not a {t}")
                try:
                    enc.body += struct.pack(fmt, v)
                except (struct.error, OverflowError) as e:
                    raise ValueError(f"{v!r} does not fit a {t}: {e}") from None
            elif t == "bool":
                if not isinstance(v, bool):
                    raise TypeError(f"{v!r} is not a bool")
                enc.body.append(1 if v else 0)
            elif t == "unit":
                if v is not None:
                    raise TypeError(f"{v!r} is not None (unit)")
            elif t == "string":
                if not isinstance(v, str):
                    raise TypeError(f"{v!r} is not a str")
                try:
                    b = v.encode()
                except UnicodeEncodeError as e:
                    # A lone surrogate (os.fsdecode's for a name that is
                    # not UTF-8) has no UTF-8 form.
                    raise ValueError(f"{v!r} is not UTF-8 text: {e.reason} at {e.start}") from None
                enc.body += struct.pack("<I", len(b)) + b
            elif t == "bytes":
                b = _bytes_of(v, t)
                enc.body += struct.pack("<I", len(b)) + b
            else:
                raise TypeError(f"unknown type {t!r}")
            return
        if "array" in t:
            b = _bytes_of(v, f"array of {t['len']} bytes")
            if len(b) != t["len"]:
                raise ValueError(f"{len(b)} bytes where the array holds {t['len']}")
            enc.body += b
        elif "list" in t:
            v = list(v)
            enc.body += struct.pack("<I", len(v))
            for x in v:
                self.encode(t["list"], x, enc)
        elif "optional" in t:
            if v is None:
                enc.body.append(0)
            else:
                enc.body.append(1)
                self.encode(t["optional"], v, enc)
        elif "record" in t:
            at = len(enc.body)
            enc.body += b"\0\0\0\0"
            self._fields(t["fields"], v, enc, t["record"])
            enc.body[at : at + 4] = struct.pack("<I", len(enc.body) - at - 4)
        elif "enum" in t:
            if not isinstance(v, Variant):
                raise TypeError(f"{v!r} is not a Variant of {t['enum']}")
            for var in t["variants"]:
                if var["name"] == v.name:
                    enc.body += struct.pack("<I", var["ordinal"])
                    if var.get("payload") is not None:
                        self.encode(var["payload"], v.payload, enc)
                    elif v.payload is not None:
                        raise TypeError(f"{t['enum']}::{v.name} has no payload")
                    break
            else:
                raise ValueError(f"{t['enum']} has no variant {v.name!r}")
        elif "send_right" in t:
            if not isinstance(v, _ferry.SendRight):
                raise TypeError(f"{v!r} is not a SendRight")
            enc.item(v)
        elif "send_once_right" in t:
            if not isinstance(v, _ferry.SendOnceRight):
                raise TypeError(f"{v!r} is not a SendOnceRight")
            enc.item(v)
        elif "receive_right" in t:
            if not isinstance(v, _ferry.ReceiveRight):
                raise TypeError(f"{v!r} is not a ReceiveRight")
            enc.item(v)
        elif "region" in t:
            mode = t["region"]
            if isinstance(v, _ferry.Region):
                if mode not in ("by_value", "any"):
                    raise TypeError(f"a Region is sent by copy, not as {mode}")
            elif isinstance(v, _ferry.RegionItem):
                if not _mode_ok(mode, v.mode):
                    raise TypeError(f"a {v.mode} region is not {mode}")
            else:
                raise TypeError(f"{v!r} is not a Region or RegionItem")
            enc.item(v)
        else:
            raise TypeError(f"unknown type {t!r}")

    def _fields(self, fields: list[dict[str, Any]], v: Any, enc: _Enc, what: str) -> None:
        for f in fields:
            name = f["name"]
            if isinstance(v, dict):
                x = v.get(name)
            else:
                x = getattr(v, name, None)
            ft = f["type"]
            # Every field is written, an absent optional one as its tag 0,
            # as the Rust stubs do.
            enc.body += struct.pack("<H", f["ordinal"])
            at = len(enc.body)
            enc.body += b"\0\0\0\0"
            try:
                self.encode(ft, x, enc)
            except TypeError as e:
                raise TypeError(f"{what}.{name}: {e}") from None
            except ValueError as e:
                raise ValueError(f"{what}.{name}: {e}") from None
            enc.body[at : at + 4] = struct.pack("<I", len(enc.body) - at - 4)

    def decode(self, t: Any, dec: _Dec) -> Any:
        """Reads and checks a value of type ``t``."""
        if isinstance(t, str):
            if t in _SCALARS:
                fmt, n = _SCALARS[t]
                return struct.unpack(fmt, dec.take(n))[0]
            if t == "bool":
                b = dec.take(1)[0]
                if b > 1:
                    raise DecodeError(f"a bool is {b}, not 0 or 1")
                return b == 1
            if t == "unit":
                return None
            if t == "string":
                n = dec.count(1)
                try:
                    return dec.take(n).decode()
                except UnicodeDecodeError:
                    raise DecodeError("a string is not UTF-8") from None
            if t == "bytes":
                return dec.take(dec.count(1))
            raise DecodeError(f"unknown type {t!r}")
        if "array" in t:
            return dec.take(int(t["len"]))
        if "list" in t:
            n = dec.count(_min_size(t["list"]))
            return [self.decode(t["list"], dec) for _ in range(n)]
        if "optional" in t:
            tag = dec.take(1)[0]
            if tag == 0:
                return None
            if tag == 1:
                return self.decode(t["optional"], dec)
            raise DecodeError(f"an optional value's tag is {tag}, not 0 or 1")
        if "record" in t:
            n = dec.u32()
            if dec.depth >= MAX_DEPTH:
                raise DecodeError(f"records nested deeper than {MAX_DEPTH}")
            dec.depth += 1
            v = dec.within(n, lambda: self._read_fields(t["fields"], dec, t["record"]))
            dec.depth -= 1
            return self.types[t["record"]](**v)
        if "enum" in t:
            tag = dec.u32()
            for var in t["variants"]:
                if var["ordinal"] == tag:
                    p = var.get("payload")
                    return Variant(var["name"], None if p is None else self.decode(p, dec))
            raise DecodeError(f"{t['enum']} has no variant {tag}")
        i, it = dec.item()
        for kind, cls in (("send_right", _ferry.SendRight), ("send_once_right", _ferry.SendOnceRight), ("receive_right", _ferry.ReceiveRight)):
            if kind in t:
                if not isinstance(it, cls):
                    raise DecodeError(f"item {i} is not a {kind.replace('_', ' ')}")
                return it
        if "region" in t:
            if not isinstance(it, _ferry.RegionItem):
                raise DecodeError(f"item {i} is not a region")
            if not _mode_ok(t["region"], it.mode):
                raise DecodeError(f"item {i} is a {it.mode} region, not {t['region']}")
            return it
        raise DecodeError(f"unknown type {t!r}")

    def _read_fields(self, fields: list[dict[str, Any]], dec: _Dec, what: str) -> dict[str, Any]:
        by_ord = {f["ordinal"]: f for f in fields}
        got: dict[str, Any] = {}
        seen: set[int] = set()
        while dec.left() > 0:
            ordinal = struct.unpack("<H", dec.take(2))[0]
            n = dec.u32()
            if n > dec.left():
                raise DecodeError(f"truncated: a value needs {n} bytes, {dec.left()} are left")
            if ordinal in seen:
                raise DecodeError(f"{what}: field {ordinal} appears twice")
            seen.add(ordinal)
            f = by_ord.get(ordinal)
            if f is None:
                dec.take(n)  # a field this definition does not know
                continue
            ft = f["type"]
            got[f["name"]] = dec.within(n, lambda: self.decode(ft, dec))
        for f in fields:
            if f["name"] not in got:
                ft = f["type"]
                if isinstance(ft, dict) and "optional" in ft:
                    got[f["name"]] = None
                else:
                    raise DecodeError(f"{what}: required field {f['ordinal']} is missing")
        return got

    # Messages ----------------------------------------------------------

    def request(self, name: str, *args: Any, **kwargs: Any) -> _ferry.Message:
        """The request message of operation ``name`` with these arguments
        (checked against their types before anything is built)."""
        op = self.operations.get(name)
        if op is None:
            raise AttributeError(f"{self.name} has no operation {name!r}")
        params = op["args"]
        if len(args) > len(params):
            raise TypeError(f"{name}() takes {len(params)} arguments, {len(args)} given")
        values = dict(zip((p["name"] for p in params), args))
        for k, v in kwargs.items():
            if k in values or all(p["name"] != k for p in params):
                raise TypeError(f"{name}() got an unexpected or repeated argument {k!r}")
            values[k] = v
        for p in params:
            if p["name"] not in values and not (isinstance(p["type"], dict) and "optional" in p["type"]):
                raise TypeError(f"{name}() is missing argument {p['name']!r}")
        enc = _Enc()
        self._fields(params, values, enc, name)
        return enc.message(int(op["ordinal"]))

    def decode_reply(self, name: str, reply: _ferry.Message) -> Any:
        """The result in ``reply`` to operation ``name``; raises the typed
        error, the server's fault, or :class:`BadReply`."""
        op = self.operations[name]
        code = reply.op
        if code == REPLY_OK:
            t = op["result"]
        elif code == REPLY_ERR and op.get("error") is not None:
            t = op["error"]
        elif code == REPLY_FAULT:
            t = None
        else:
            raise UnexpectedReply(f"{_unexpected(code)} to {name}")
        dec = _Dec(reply.body, reply.items)
        try:
            if code == REPLY_FAULT:
                fcode, text = dec.u32(), self.decode("string", dec)
                dec.finish()
                raise _FAULTS.get(fcode, Fault)(fcode, text)
            v = self.decode(t, dec)
            dec.finish()
        except DecodeError as e:
            raise BadReply(f"{name}: {e}") from None
        if code == REPLY_ERR:
            raise ErrorReply(v)
        return v

    def hello_request(self) -> _ferry.Message:
        """The version check's request (operation 0)."""
        enc = _Enc()
        self.encode(_HELLO, {"name": self.name, "version": self.version, "compatible": self.compatible}, enc)
        return enc.message(OP_HELLO)

    def hello_check(self, reply: _ferry.Message) -> int:
        """Checks the server's answer to the version check; its version."""
        if reply.op == REPLY_FAULT:
            dec = _Dec(reply.body, reply.items)
            try:
                fcode, text = dec.u32(), self.decode("string", dec)
                dec.finish()
            except DecodeError as e:
                raise BadReply(f"version check: {e}") from None
            raise _FAULTS.get(fcode, Fault)(fcode, text)
        if reply.op != REPLY_OK:
            raise UnexpectedReply(f"{_unexpected(reply.op)} to the version check")
        dec = _Dec(reply.body, reply.items)
        try:
            theirs = self.decode(_HELLO, dec)
            dec.finish()
        except DecodeError as e:
            raise BadReply(f"version check: {e}") from None
        if theirs.name != self.name:
            raise Incompatible(f"the server speaks {theirs.name!r}, not {self.name!r}")
        if theirs.version < self.compatible:
            raise Incompatible(f"the server's version {theirs.version} is older than {self.compatible}, the oldest this client talks to")
        return int(theirs.version)

    def client(self, to: _ferry.SendRight | _ferry.Connection, timeout: float | None = None) -> Client:
        """A typed client over a port (a :class:`ferry.SendRight`) or an RPC
        connection; makes the version check first."""
        return Client(self, to, timeout)

    # Serving -----------------------------------------------------------

    def dispatch(self, impl: Any, request: _ferry.Message) -> tuple[_ferry.Message | None, bool]:
        """Answers one request with ``impl``: the reply (None for a one-way
        operation that went well, and for an answer, which is never a
        request: it is dropped) and whether ``impl`` ran."""
        code = request.op
        if code & ANSWER:
            _drop_answer(self.name, code)
            return None, False
        items = request.items
        if code == OP_HELLO:
            return self._answer_hello(request.body, items), False
        op = self.by_ordinal.get(code)
        if op is None:
            return _fault(1, str(code)), False
        dec = _Dec(request.body, items)
        try:
            args = self._read_fields(op["args"], dec, op["name"])
            dec.finish()
        except DecodeError as e:
            return _fault(2, str(e)), False
        try:
            result = getattr(impl, op["name"])(**args)
        except ErrorReply as e:
            if op.get("error") is None:
                raise
            return self._reply(REPLY_ERR, op["error"], e.error), True
        if op["kind"] == "oneway":
            return None, True
        return self._reply(REPLY_OK, op["result"], result), True

    def _reply(self, code: int, t: Any, v: Any) -> _ferry.Message:
        enc = _Enc()
        try:
            self.encode(t, v, enc)
        except (TypeError, ValueError) as e:
            return _fault(4, f"the implementation's answer is not of its declared type: {e}")
        return enc.message(code)

    def _answer_hello(self, body: bytes, items: list[Any]) -> _ferry.Message:
        dec = _Dec(body, items)
        try:
            theirs = self.decode(_HELLO, dec)
            dec.finish()
        except DecodeError as e:
            return _fault(2, f"version check: {e}")
        if theirs.name != self.name:
            return _fault(3, f"this server speaks {self.name!r}, not {theirs.name!r}")
        if theirs.version < self.compatible:
            return _fault(3, f"{self.name} version {theirs.version} is older than {self.compatible}, the oldest this server talks to")
        return self._reply(REPLY_OK, _HELLO, {"name": self.name, "version": self.version, "compatible": self.compatible})

    def serve_port(self, impl: Any, port: _ferry.ReceiveRight, timeout: float | None = None) -> None:
        """Serves requests arriving on ``port`` until no sender is left (or
        nothing arrives for ``timeout`` seconds: ferry's receive timeout).
        A call without a reply right is not run (nobody could learn its
        outcome). A malformed message (``BadMessage``, which the receive
        dropped whole) or a send-once right to the port destroyed unused
        is skipped, as the Rust and C servers do: a peer cannot stop the
        server with one. An exception the implementation raises (other
        than ``ErrorReply``) goes up from here, after the reply right of
        the call that raised it is closed (its client's call ends with
        ``SendOnceDropped``)."""
        from .errors import BadMessage, MessageTooLarge, NoSenders, SendOnceDropped

        while True:
            try:
                m = port.recv(timeout)
            except NoSenders:
                return
            except (BadMessage, SendOnceDropped):
                continue
            if m.op & ANSWER:
                # An answer sent on to this server: never a request, and
                # never answered.
                _drop_answer(self.name, m.op)
                continue
            op = self.by_ordinal.get(m.op)
            reply_right = m.take_reply()
            if reply_right is None and (op is None or op["kind"] != "oneway"):
                continue  # a call nobody could learn the outcome of
            try:
                answer, _ = self.dispatch(impl, m)
            except BaseException:
                # The implementation raised: no answer comes, and the
                # exception (whose traceback keeps this frame) may be kept
                # for long; its client learns now.
                if reply_right is not None:
                    reply_right.close()
                raise
            if answer is not None and reply_right is not None:
                try:
                    reply_right.send(answer, 0)
                except MessageTooLarge as e:
                    # The answer cannot travel: say so instead, as the Rust
                    # server does.
                    try:
                        reply_right.send(_fault(4, f"the reply could not be sent: {e}"), 0)
                    except FerryError:
                        pass
                except FerryError:
                    pass  # a client gone or not reading loses its reply only
                # A reply right a failed send left unused goes now: its
                # client learns at once that no answer comes.
                reply_right.close()

    def serve_rpc(self, impl: Any, server: _ferry.RpcServer, timeout: float | None = None) -> None:
        """Serves calls on an RPC server until it has no clients left. An
        exception the implementation raises (other than ``ErrorReply``)
        goes up from here, after the connection of the call that raised it
        is dropped (its client's call ends with ``RpcPeerDead``)."""
        from .errors import NoClients

        reply: tuple[_ferry.ConnId, _ferry.Message] | None = None
        while True:
            try:
                conn, m = server.reply_and_wait(reply, timeout)
            except NoClients:
                return
            if m.op & ANSWER:
                # Every call on a connection is answered, to the
                # connection's maker, as whom it acts: an answer is refused.
                reply = (conn, _fault(2, "the operation id is an answer's, not a request's"))
                continue
            try:
                answer, _ = self.dispatch(impl, m)
            except BaseException:
                # The implementation raised: no answer comes, and the
                # connection could take no other request; its client learns
                # now (RpcPeerDead) rather than at its timeout.
                server.drop_connection(conn)
                raise
            reply = (conn, answer if answer is not None else _ferry.Message(REPLY_OK))


_HELLO: dict[str, Any] = {
    "record": "IdlHello",
    "fields": [
        {"name": "name", "ordinal": 1, "type": "string"},
        {"name": "version", "ordinal": 2, "type": "u32"},
        {"name": "compatible", "ordinal": 3, "type": "u32"},
    ],
}


def _bytes_of(v: Any, what: str) -> bytes:
    """The bytes of ``v`` for a ``bytes`` or array value: a bytes-like
    object or a sequence of integers. An integer is refused, not taken for
    a length (``bytes(4)`` is four zero bytes), and so is a string."""
    if isinstance(v, (int, str)):
        raise TypeError(f"{v!r} is not bytes (for a {what})")
    return bytes(v)


def _mode_ok(declared: str, mode: str) -> bool:
    return {"by_value": mode in ("copy", "move"), "lend": mode == "lend", "share": mode == "share", "any": True}.get(declared, False)


#: Answers the servers of this process dropped because they arrived as
#: requests (see :data:`ANSWER`).
answers_dropped = 0
_answer_said = 0.0


def _drop_answer(iface: str, op: int) -> None:
    """Counts an answer that reached a server of ``iface`` as a request and
    says so on standard error at most once a minute."""
    import sys
    import time

    global answers_dropped, _answer_said
    answers_dropped += 1
    now = time.monotonic()
    if _answer_said == 0.0 or now - _answer_said >= 60:
        _answer_said = now
        print(f"ferry: {iface}: dropped an answer (operation id {op:#x}) that arrived as a request; {answers_dropped} so far (said at most once a minute)", file=sys.stderr)


def _unexpected(code: int) -> str:
    """How an unexpected reply code reads: an old server's plainly."""
    if code <= 2:
        return f"reply code {code} of the typed protocol before answers were marked (the server is too old for this client)"
    return f"reply code {code:#x}"


def _fault(code: int, text: str) -> _ferry.Message:
    b = text.encode()
    return _ferry.Message(REPLY_FAULT, struct.pack("<II", code, len(b)) + b)


class Client:
    """A typed proxy: one method per operation of its interface. It owns the
    send right or connection it was made with; ``close()`` (or leaving a
    ``with`` block) closes it. An operation named like one of the client's
    own methods or attributes (``close``, ``call``, ``timeout``...) is the
    method of that name with an underscore (``close_()``), as the C stubs
    name it; ``call(name, ...)`` calls any operation by its name."""

    def __init__(self, iface: Interface, to: _ferry.SendRight | _ferry.Connection, timeout: float | None = None) -> None:
        self.interface = iface
        self._to = to
        self.timeout = timeout
        self._reply_port: _ferry.ReceiveRight | None = None
        self.peer_version = iface.hello_check(self._call(iface.hello_request()))

    def _call(self, request: _ferry.Message) -> _ferry.Message:
        if isinstance(self._to, _ferry.Connection):
            return self._to.call(request, self.timeout)
        if self._reply_port is None:
            self._reply_port, _ = _ferry.port()
        rx = self._reply_port
        try:
            self._to.send(request.set_reply(rx.make_send_once()), self.timeout)
            return rx.recv(self.timeout)
        except BaseException:
            # A late reply must never answer a later call: a fresh port.
            self._reply_port = None
            raise

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Calls operation ``name``; its result (None for one-way)."""
        iface = self.interface
        request = iface.request(name, *args, **kwargs)
        op = iface.operations[name]
        if op["kind"] == "oneway" and not isinstance(self._to, _ferry.Connection):
            self._to.send(request, self.timeout)
            return None
        reply = self._call(request)
        if op["kind"] == "oneway":
            return None
        return iface.decode_reply(name, reply)

    def close(self) -> None:
        """Closes the send right or connection this client was given (it
        owns it) and its reply port; the server sees one client fewer."""
        self._to.close()
        if self._reply_port is not None:
            self._reply_port.close()
            self._reply_port = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _own(self, name: str) -> bool:
        """Whether ``name`` is the client's own (``close``, ``call``...),
        which an operation of that name does not hide."""
        return hasattr(Client, name) or name in vars(self)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = name
        if name.endswith("_") and self._own(name[:-1]):
            # An operation named like the client's own method or attribute
            # is reached with an underscore, as the C stubs name it.
            op = name[:-1]
        if name.startswith("_") or op not in self.interface.operations:
            raise AttributeError(f"{self.interface.name} has no operation {name!r}")
        return lambda *args, **kwargs: self.call(op, *args, **kwargs)

    def __dir__(self) -> list[str]:
        ops = {op + "_" if self._own(op) else op for op in self.interface.operations}
        return sorted(set(super().__dir__()) | ops)


def load(description: str | bytes | dict[str, Any]) -> Interface:
    """An :class:`Interface` from a description: its JSON text or the
    parsed object (either the description itself or an object holding it
    under ``"description"``, as the contract files do)."""
    if isinstance(description, (str, bytes)):
        description = json.loads(description)
    assert isinstance(description, dict)
    return Interface(description)


__all__ = [
    "load",
    "Interface",
    "Client",
    "Variant",
    "IdlError",
    "DecodeError",
    "BadReply",
    "UnexpectedReply",
    "Incompatible",
    "Fault",
    "UnknownOperation",
    "BadRequest",
    "IncompatibleFault",
    "ReplyTooLarge",
    "ErrorReply",
]
