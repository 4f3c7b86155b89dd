"""Typed interfaces from Python (``ferry.idl``), built from the description
the Rust definition emits: the example key-value store of
``tests/src/kv.rs``, whose description and exact request and reply bytes
are the contract file ``tests/idl/example.kv.json`` (checked against the
Rust stubs by ``tests/tests/idl.rs``). A Python client talks to the Rust
store, a Rust client to a Python store, over ports and over RPC; a Python
server refuses what does not match before its implementation runs."""

from __future__ import annotations

import json
import os
import struct
import threading
from typing import Any

import numpy as np
import pytest

import ferry
import ferry.idl as idl
from conftest import LIMIT, REPO, finish, spawn_rust, unique

CONTRACT = json.loads((REPO / "tests" / "idl" / "example.kv.json").read_text())
KV = idl.load(CONTRACT)
MAX_VALUE = 64 << 20


def region_of(data: bytes) -> ferry.Region:
    r = ferry.Region(max(len(data), 1))
    ferry.ndarray(r, "u1", len(data))[:] = np.frombuffer(data, "u1")
    return r


def test_requests_are_the_contract_bytes():
    reqs = CONTRACT["requests"]
    for text, m in [
        ('get("key")', KV.request("get", "key")),
        ('remove("k")', KV.request("remove", "k")),
        ("list()", KV.request("list")),
        ("hello", KV.hello_request()),
    ]:
        assert m.op == reqs[text]["op"], text
        assert m.body.hex() == reqs[text]["body_hex"], text
    put = KV.request("put", "k", region_of(b"v"))
    want = reqs['put("k", region of b"v")']
    assert (put.op, put.body.hex()) == (want["op"], want["body_hex"])


def reply(text: str) -> ferry.Message:
    r = CONTRACT["replies"][text]
    return ferry.Message(r["op"], bytes.fromhex(r["body_hex"]))


def test_replies_decode_as_the_contract_says():
    assert KV.decode_reply("put", reply("put: Ok(Some(1))")) == 1
    with pytest.raises(idl.ErrorReply) as e:
        KV.decode_reply("put", reply("put: Err(TooLarge(64 MiB))"))
    assert e.value.error == idl.Variant("TooLarge", MAX_VALUE)
    (entry,) = KV.decode_reply("list", reply('list: [Entry { key: "k", len: 1 }]'))
    assert entry == KV.types["Entry"](key="k", len=1)
    with pytest.raises(idl.UnknownOperation) as f:
        KV.decode_reply("get", reply("fault: UnknownOperation(77)"))
    assert f.value.text == "77"


def test_the_name_service_protocol_is_spoken_from_its_description():
    # The name service is a typed interface too; its contract file
    # (tests/idl/ferry.names.json) is what any other language needs.
    names = json.loads((REPO / "tests" / "idl" / "ferry.names.json").read_text())
    proto = idl.load(names)
    assert (proto.name, sorted(proto.operations)) == ("ferry.names", ["list", "lookup", "register", "register_system", "register_system_service", "unregister"])
    reqs = names["requests"]
    for text, m in [('lookup("svc")', proto.request("lookup", "svc")), ('unregister("svc")', proto.request("unregister", "svc")), ("list()", proto.request("list")), ("hello", proto.hello_request())]:
        assert (m.op, m.body.hex()) == (reqs[text]["op"], reqs[text]["body_hex"]), text
    r = names["replies"]
    listing = proto.decode_reply("list", ferry.Message(r["list: Inline([svc of uid 1000, pid 42])"]["op"], bytes.fromhex(r["list: Inline([svc of uid 1000, pid 42])"]["body_hex"])))
    assert listing.name == "Inline"
    (entry,) = listing.payload
    assert (entry.name, entry.uid, entry.owner_pid, entry.queued_bytes) == ("svc", 1000, 42, 0)
    with pytest.raises(idl.ErrorReply) as e:
        proto.decode_reply("lookup", ferry.Message(r["lookup: Err(NotFound)"]["op"], bytes.fromhex(r["lookup: Err(NotFound)"]["body_hex"])))
    assert e.value.error == idl.Variant("NotFound", None)


def test_bad_arguments_are_refused_before_sending():
    with pytest.raises(TypeError):
        KV.request("get", 7)
    with pytest.raises(TypeError):
        KV.request("put", "k", b"not a region")
    with pytest.raises(TypeError):
        KV.request("get")
    with pytest.raises(AttributeError):
        KV.request("nosuch")


TYPES = idl.load(
    {
        "interface": "test.types",
        "version": 1,
        "compatible": 1,
        "operations": [
            {
                "name": "digest",
                "ordinal": 1,
                "kind": "call",
                "args": [
                    {"name": "data", "ordinal": 1, "type": "bytes"},
                    {"name": "tag", "ordinal": 2, "type": {"array": "u8", "len": 4}},
                    {"name": "scale", "ordinal": 3, "type": "f32"},
                ],
                "result": "f32",
                "error": None,
            }
        ],
    }
)


class Digest:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def digest(self, data: bytes, tag: bytes, scale: float) -> Any:
        return self.answer


def test_values_not_of_their_type_are_refused_not_converted():
    """An int is not bytes (``bytes(4)`` is four zero bytes), a float too
    large for an f32 does not fit it: a client refuses such arguments with
    ``TypeError`` or ``ValueError`` before sending, and a server answers
    such a result with a fault rather than stopping."""
    assert TYPES.request("digest", b"ok", b"abcd", 0.5).op == 1
    for data, tag in [(4, b"abcd"), (True, b"abcd"), (b"ok", 4), (b"ok", 10**12)]:
        with pytest.raises(TypeError):
            TYPES.request("digest", data, tag, 1.0)
    for scale in (1e300, 10**400):
        with pytest.raises(ValueError):
            TYPES.request("digest", b"ok", b"abcd", scale)
    for answer in (1e300, 10**400, "text"):
        reply, ran = TYPES.dispatch(Digest(answer), TYPES.request("digest", b"ok", b"abcd", 1.0))
        assert ran
        with pytest.raises(idl.Fault) as e:
            TYPES.decode_reply("digest", reply)
        assert e.value.code == 4, e.value
    reply, _ = TYPES.dispatch(Digest(0.25), TYPES.request("digest", b"ok", b"abcd", 1.0))
    assert TYPES.decode_reply("digest", reply) == 0.25


def test_a_string_that_is_not_utf8_text_is_refused_with_value_error():
    """A ``str`` with a lone surrogate (``os.fsdecode`` gives one for a
    file name that is not UTF-8) has no UTF-8 form, so it cannot travel as
    a ``string``: the client refuses it with ``ValueError`` naming the
    argument, and a server answers such a result with a fault."""
    key = os.fsdecode(b"name-\xff")
    with pytest.raises(ValueError, match="get.key"):
        KV.request("get", key)
    entry = KV.types["Entry"]

    class Lister:
        def list(self) -> list[Any]:
            return [entry(key=key, len=1)]

    reply, ran = KV.dispatch(Lister(), KV.request("list"))
    assert ran
    with pytest.raises(idl.Fault) as e:
        KV.decode_reply("list", reply)
    assert e.value.code == 4 and "Entry.key" in e.value.text, e.value


def test_bad_replies_are_typed_errors():
    for body in ["02", "0100", "01010000000000000000"]:  # bad tag, short, trailing
        with pytest.raises(idl.BadReply):
            KV.decode_reply("put", ferry.Message(idl.REPLY_OK, bytes.fromhex(body)))
    with pytest.raises(idl.UnexpectedReply):
        KV.decode_reply("put", ferry.Message(9))
    # A fault reply that does not decode (cut short in its code, in its
    # text, not UTF-8, bytes left over) is a bad reply, to a call and to
    # the version check alike.
    fault = struct.pack("<II", 1, 1) + b"x"
    for body in [b"\x01", fault[:-1], struct.pack("<II", 1, 1) + b"\xff", fault + b"\x00"]:
        reply = ferry.Message(idl.REPLY_FAULT, body)
        with pytest.raises(idl.BadReply):
            KV.decode_reply("put", reply)
        with pytest.raises(idl.BadReply):
            KV.hello_check(reply)
    with pytest.raises(idl.Fault):
        KV.hello_check(ferry.Message(idl.REPLY_FAULT, fault))
    # A server from before answers were marked: told plainly.
    with pytest.raises(idl.UnexpectedReply, match="before answers were marked"):
        KV.decode_reply("put", ferry.Message(0, bytes.fromhex("0100")))


def run_script(store: idl.Client, tag: str) -> None:
    """Every operation against a store in another language."""
    key, value = f"py-{tag}", f"value from Python over {tag}".encode()
    assert store.put(key, region_of(value)) is None
    assert store.put(key, region_of(value)) == len(value)
    got = store.get(key)
    assert isinstance(got, ferry.RegionItem) and got.mode in ("copy", "move")
    assert got.copy_out() == value
    with pytest.raises(idl.ErrorReply) as e:
        store.put("", region_of(b"x"))
    assert e.value.error == idl.Variant("EmptyKey")
    assert KV.types["Entry"](key=key, len=len(value)) in store.list()
    assert store.remove(key) is True and store.remove(key) is False
    assert store.get(key) is None


def test_python_client_rust_server_over_port_and_rpc():
    name = unique("kv")
    rust = spawn_rust("idl-kv-named", name)
    assert rust.stdout is not None and rust.stdout.readline().strip() == "ready"
    with ferry.Bootstrap() as bs:
        to_port, to_rpc = bs.lookup(name), bs.lookup(name + ".rpc")
        bs.unregister(name)
        bs.unregister(name + ".rpc")
    with KV.client(to_port, timeout=LIMIT) as by_port:
        assert by_port.peer_version == 1
        run_script(by_port, "port")
    conn = ferry.Connection(to_rpc, timeout=LIMIT)
    to_rpc.close()
    with KV.client(conn, timeout=LIMIT) as by_rpc:
        run_script(by_rpc, "rpc")
        # An operation the server lacks is answered, not dropped.
        with pytest.raises(idl.UnknownOperation):
            KV.decode_reply("get", conn.call(ferry.Message(77), LIMIT))
    out = finish(rust)
    assert "served" in out


class PyStore:
    """The example store in Python: values kept in regions of their own,
    handed out by value (copy-on-write)."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[ferry.Region, int]] = {}
        self.calls = 0
        self.lock = threading.Lock()

    def put(self, key: str, value: ferry.RegionItem) -> int | None:
        with self.lock:
            self.calls += 1
            if not key:
                raise idl.ErrorReply(idl.Variant("EmptyKey"))
            if len(value) > MAX_VALUE:
                raise idl.ErrorReply(idl.Variant("TooLarge", MAX_VALUE))
            data = value.copy_out()
            old = self.values.get(key)
            self.values[key] = (region_of(data), len(data))
            return None if old is None else old[1]

    def get(self, key: str) -> ferry.Region | None:
        with self.lock:
            self.calls += 1
            v = self.values.get(key)
            return None if v is None else v[0]

    def remove(self, key: str) -> bool:
        with self.lock:
            self.calls += 1
            return self.values.pop(key, None) is not None

    def list(self) -> list[Any]:
        with self.lock:
            self.calls += 1
            return [KV.types["Entry"](key=k, len=n) for k, (_, n) in sorted(self.values.items())]


def test_rust_client_python_server_over_port_and_rpc():
    store = PyStore()
    name = unique("pykv")
    port_rx, port_tx = ferry.port()
    rpc_rx, rpc_tx = ferry.port()
    server = ferry.RpcServer(rpc_rx)
    with ferry.Bootstrap() as bs:
        bs.register(name, port_tx)
        bs.register(name + ".rpc", rpc_tx)
    port_tx.close()
    rpc_tx.close()
    errors: list[BaseException] = []

    def serve(f: Any, *args: Any) -> None:
        try:
            f(store, *args, LIMIT)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=serve, args=(KV.serve_port, port_rx)), threading.Thread(target=serve, args=(KV.serve_rpc, server))]
    for t in threads:
        t.start()
    rust = spawn_rust("idl-kv-client", name)
    out = finish(rust)
    assert "kv-client-ok" in out, out
    with ferry.Bootstrap() as bs:
        bs.unregister(name)
        bs.unregister(name + ".rpc")
    for t in threads:
        t.join(LIMIT * 2)
        assert not t.is_alive()
    assert not errors, errors
    assert store.calls >= 12


def test_a_python_server_goes_on_serving_after_malformed_datagrams(names):
    """A peer that sends malformed datagrams to a typed server's port (the
    Rust ``ferry-peer hostile-flood``: each is refused by the receive,
    ``BadMessage``) does not stop it, as it does not stop the Rust and C
    servers: a client's calls that follow are answered."""
    store = PyStore()
    name = unique("pykv-hostile")
    rx, tx = ferry.port()
    names.register(name, tx.clone())
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            KV.serve_port(store, rx, LIMIT)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    thread = threading.Thread(target=serve)
    thread.start()
    flood = spawn_rust("hostile-flood", name, "5")
    finish(flood)
    with KV.client(tx, timeout=LIMIT) as client:
        assert client.put("after", region_of(b"flood")) is None
        assert client.remove("after") is True
    names.unregister(name)
    thread.join(LIMIT * 2)
    assert not thread.is_alive()
    assert not errors, errors
    assert store.calls == 2


def test_a_python_server_answers_a_reply_too_large_to_send_with_a_fault():
    """A result too large for a message (a listing of more than 64 KiB)
    cannot be sent as the reply over a port: the client gets the
    ``ReplyTooLarge`` fault, as from the Rust server, and the server goes
    on serving."""

    class Huge:
        def list(self) -> list[Any]:
            return [KV.types["Entry"](key=f"{i:0200d}", len=i) for i in range(1000)]

        def remove(self, key: str) -> bool:
            return key == "x"

    rx, tx = ferry.port()
    thread = threading.Thread(target=KV.serve_port, args=(Huge(), rx, LIMIT))
    thread.start()
    with KV.client(tx, timeout=LIMIT) as client:
        with pytest.raises(idl.ReplyTooLarge):
            client.list()
        assert client.remove("x") is True
    thread.join(LIMIT * 2)
    assert not thread.is_alive()


FILES = idl.load(
    {
        "interface": "test.files",
        "version": 1,
        "compatible": 1,
        "operations": [
            {"name": "open", "ordinal": 1, "kind": "call", "args": [{"name": "path", "ordinal": 1, "type": "string"}], "result": "u32", "error": None},
            {"name": "close", "ordinal": 2, "kind": "call", "args": [{"name": "fd", "ordinal": 1, "type": "u32"}], "result": "bool", "error": None},
            {"name": "call", "ordinal": 3, "kind": "call", "args": [], "result": "string", "error": None},
        ],
    }
)


def test_operations_named_like_the_clients_own_methods_are_called_with_an_underscore():
    """A client's ``close()`` closes the client and ``call(name, ...)``
    calls by name, so an interface's own ``close`` and ``call`` operations
    are its methods ``close_()`` and ``call_()`` (as C names them), and
    ``dir()`` lists them so."""

    class Files:
        def __init__(self) -> None:
            self.closed: list[int] = []

        def open(self, path: str) -> int:
            return len(path)

        def close(self, fd: int) -> bool:
            self.closed.append(fd)
            return True

        def call(self) -> str:
            return "called"

    impl = Files()
    rx, tx = ferry.port()
    thread = threading.Thread(target=FILES.serve_port, args=(impl, rx, LIMIT))
    thread.start()
    with FILES.client(tx, timeout=LIMIT) as client:
        assert {"open", "close_", "call_"} <= set(dir(client))
        assert client.open("abc") == 3
        assert client.close_(3) is True
        assert client.call_() == "called"
        assert client.call("close", 4) is True
        with pytest.raises(AttributeError):
            client.open_
    assert impl.closed == [3, 4]
    thread.join(LIMIT * 2)
    assert not thread.is_alive()


def test_two_different_records_of_one_name_are_refused_at_load():
    """Records are made into classes by name (``iface.types``): a
    description with two different records of one name (two Rust types
    named ``Entry`` in different modules, say) is refused when loaded,
    instead of one record's values failing to decode later as the other
    (a ``TypeError`` out of the dispatcher, which stopped its server)."""
    desc = json.loads(json.dumps(CONTRACT))
    other = {"record": "Entry", "fields": [{"name": "other", "ordinal": 1, "type": "u32"}]}
    desc["description"]["operations"].append({"name": "other", "ordinal": 9, "kind": "call", "args": [], "result": other, "error": None})
    with pytest.raises(ValueError, match="Entry"):
        idl.load(desc)
    # The same record used twice is one record.
    same = json.loads(json.dumps(CONTRACT))
    entry = same["description"]["operations"][3]["result"]["list"]
    same["description"]["operations"].append({"name": "first", "ordinal": 9, "kind": "call", "args": [], "result": entry, "error": None})
    assert idl.load(same).types["Entry"]._fields == ("key", "len")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_python_server_validates_then_acts():
    """Requests that do not match the interface are answered with a
    BadRequest fault (unknown operations with UnknownOperation), never reach
    the implementation, and leave no descriptor behind."""
    store = PyStore()
    stray_rx, stray = ferry.port()
    before = fds()
    bad = [
        ferry.Message(2, bytes.fromhex("0100070000000300000078")),  # get: string cut short
        ferry.Message(2, bytes.fromhex("010005000000010000006bff")),  # get: trailing byte
        ferry.Message(2, bytes.fromhex("0100050000000100000080")),  # get: not UTF-8
        ferry.Message(3),  # remove: key missing
        ferry.Message(1, bytes.fromhex("010005000000010000006b02000400000000000000")).add(stray.clone()),  # a right where a region belongs
        ferry.Message(2, bytes.fromhex("010005000000010000006b")).add(region_of(b"x")),  # an item nobody claims
    ]
    for m in bad:
        answer, ran = KV.dispatch(store, m)
        assert not ran and answer is not None and answer.op == idl.REPLY_FAULT
        with pytest.raises(idl.BadRequest):
            KV.decode_reply("get", answer)
    answer, ran = KV.dispatch(store, ferry.Message(77))
    assert not ran
    with pytest.raises(idl.UnknownOperation):
        KV.decode_reply("get", answer)
    del bad, m, answer
    assert store.calls == 0
    assert fds() == before
    stray.close()
    stray_rx.close()


def test_python_server_drops_an_answer_unanswered():
    """An answer handed on to a server (its port named as the reply right of
    a request to another) is never a request: the Python server neither
    runs nor answers it, and counts it; the next request is served."""
    store = PyStore()
    rx, tx = ferry.port()
    server = threading.Thread(target=KV.serve_port, args=(store, rx))
    server.start()
    replies, back = ferry.port()
    dropped = idl.answers_dropped
    # The store's refusal TooLarge(64 MiB): as a request (without the mark)
    # its bytes would read as put() with unknown fields.
    tx.send(ferry.Message(idl.REPLY_ERR, bytes.fromhex("010000000000000400000000")).set_reply(back.clone()), LIMIT)
    tx.send(KV.request("list").set_reply(back.clone()), LIMIT)
    first = replies.recv(LIMIT)
    assert first.op == idl.REPLY_OK and KV.decode_reply("list", first) == []
    assert idl.answers_dropped == dropped + 1
    assert store.calls == 1
    tx.close()
    back.close()
    server.join(LIMIT)
    assert not server.is_alive()
    replies.close()


@pytest.mark.parametrize("transport", ["port", "rpc"])
def test_an_implementation_that_raises_ends_its_callers_call_at_once(transport):
    """An implementation's own exception (not an ``ErrorReply``) goes up
    through ``serve_port`` or ``serve_rpc`` to whoever runs them, who may
    keep it (and with it its traceback and every frame's locals). The call
    that raised it ends at once all the same: over a port its reply right
    is closed (``SendOnceDropped``), over RPC its connection is dropped
    (``RpcPeerDead``); it waited out the client's timeout instead (and with
    no timeout, for ever), the connection's next request never taken."""

    class Broken(PyStore):
        def list(self) -> list[Any]:
            raise KeyError("broken")

    rx, tx = ferry.port()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            if transport == "port":
                KV.serve_port(Broken(), rx)
            else:
                KV.serve_rpc(Broken(), ferry.RpcServer(rx))
        except KeyError as e:
            raised.append(e)

    server = threading.Thread(target=run)
    server.start()
    to = tx.clone() if transport == "port" else ferry.Connection(tx, "block", LIMIT)
    with KV.client(to, timeout=10) as client:
        assert client.remove("k") is False
        ended = ferry.SendOnceDropped if transport == "port" else ferry.RpcPeerDead
        with pytest.raises(ended):
            client.list()
    server.join(LIMIT)
    assert not server.is_alive()
    assert [type(e) for e in raised] == [KeyError]
    tx.close()
    del raised
