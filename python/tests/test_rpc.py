"""RPC: a Python client calling a Python server in another process."""

from __future__ import annotations

import ferry
import pytest
from conftest import LIMIT, finish, spawn_python, unique
from test_ports import _lookup


@pytest.mark.parametrize("policy", ["adaptive", "block"])
def test_calls_to_a_server_in_another_process(names, policy):
    name = unique("rpc")
    calls = 50
    peer = spawn_python("rpc-server", name, str(calls))
    server = _lookup(names, name)
    with ferry.Connection(server, policy=policy, timeout=LIMIT) as conn:
        for i in range(calls):
            reply = conn.call(ferry.Message(i, f"call {i}".encode()), LIMIT)
            assert (reply.op, reply.body) == (i + 1, f"CALL {i}".encode())
    assert f"served {calls}" in finish(peer)


def test_call_to_a_dead_server_raises_rpc_peer_dead():
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    assert rx.closed
    conn_box = []

    import threading

    t = threading.Thread(target=lambda: conn_box.append(ferry.Connection(tx, timeout=LIMIT)))
    t.start()
    with pytest.raises(ferry.RpcTimeout):
        server.reply_and_wait(None, 0.2)  # accepts the connection, no call yet
    t.join(LIMIT)
    (conn,) = conn_box
    server.close()
    with pytest.raises(ferry.RpcPeerDead):
        conn.call(ferry.Message(1), LIMIT)


def test_requests_name_their_client():
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    import os
    import threading

    replies = []

    def client() -> None:
        with ferry.Connection(tx, policy="block", timeout=LIMIT) as conn:
            replies.append(conn.call(ferry.Message(1, b"slot"), LIMIT).op)
            right = tx.clone()
            replies.append(conn.call(ferry.Message(2, b"socket").add(right), LIMIT).op)

    t = threading.Thread(target=client)
    t.start()
    conn, req = server.reply_and_wait(None, LIMIT)
    senders = [req.sender]
    conn, req = server.reply_and_wait((conn, ferry.Message(11)), LIMIT)
    senders.append(req.sender)
    server.reply(conn, ferry.Message(12))
    t.join(LIMIT)
    assert replies == [11, 12]
    assert senders == [(os.getpid(), os.getuid(), os.getgid())] * 2
    server.close()


def test_a_call_on_a_closed_connection_leaves_its_request_whole():
    """A call or an asynchronous send on a closed connection raises
    ``ValueError`` and uses nothing up: the request, with its right, can
    still be sent elsewhere."""
    import threading

    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    conn_box = []
    t = threading.Thread(target=lambda: conn_box.append(ferry.Connection(tx, timeout=LIMIT)))
    t.start()
    with pytest.raises(ferry.RpcTimeout):
        server.reply_and_wait(None, 0.2)  # accepts the connection
    t.join(LIMIT)
    (conn,) = conn_box
    conn.close()
    kept_rx, kept_tx = ferry.port()
    request = ferry.Message(7, b"whole").add(kept_tx)
    with pytest.raises(ValueError):
        conn.call(request, LIMIT)
    with pytest.raises(ValueError):
        conn.send_request(request)
    other_rx, other_tx = ferry.port()
    other_tx.send(request, LIMIT)
    got = other_rx.recv(LIMIT)
    assert (got.op, got.body, len(got.items)) == (7, b"whole", 1)
    server.close()


def test_a_reply_too_large_to_travel_fails_its_call_and_the_server_goes_on():
    """A reply that cannot travel (a body over the inline limit) fails that
    client's call, as a Rust server does; ``reply_and_wait`` goes on to the
    next request instead of raising, so a serving loop keeps serving."""
    import threading

    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    outcomes: list[object] = []

    def client() -> None:
        with ferry.Connection(tx, policy="block", timeout=LIMIT) as conn:
            try:
                conn.call(ferry.Message(1, b"big"), LIMIT)
                outcomes.append("answered")
            except ferry.RpcError as e:
                outcomes.append(type(e).__name__)
            outcomes.append(conn.call(ferry.Message(2, b"small"), LIMIT).body)

    t = threading.Thread(target=client)
    t.start()
    conn, req = server.reply_and_wait(None, LIMIT)
    assert req.body == b"big"
    conn, req = server.reply_and_wait((conn, ferry.Message(1, bytes(ferry.MAX_INLINE + 1))), LIMIT)
    assert req.body == b"small"
    server.reply(conn, ferry.Message(2, b"small answered"))
    t.join(LIMIT)
    assert outcomes == ["RpcError", b"small answered"]
    server.close()


def test_a_connection_opened_before_a_fork_refuses_calls_in_the_child():
    """Calls on one connection share its slot and their sequence numbers,
    which a forked child holds a copy of: children calling on a connection
    their parent opened got each other's replies. A child's call on it is
    refused (``RpcError``, nothing sent) and a connection the child opens
    works, as does the parent's, before and after."""
    import os
    import threading

    rx, tx = ferry.port()
    server = ferry.RpcServer(rx, "block")

    def serve() -> None:
        reply = None
        while True:
            try:
                conn, req = server.reply_and_wait(reply, LIMIT)
            except ferry.FerryError:
                return
            reply = (conn, ferry.Message(req.op + 1, req.body))

    thread = threading.Thread(target=serve)
    thread.start()
    conn = ferry.Connection(tx, "block", LIMIT)
    assert conn.call(ferry.Message(1, b"parent"), LIMIT).body == b"parent"
    children = []
    for c in range(2):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                request = ferry.Message(2, b"child %d" % c)
                try:
                    conn.call(request, LIMIT)
                except ferry.RpcError as e:
                    code = 2 if isinstance(e, (ferry.RpcTimeout, ferry.RpcPeerDead)) or request.sent else 0
                if code == 0:
                    with ferry.Connection(tx, "block", LIMIT) as own:
                        for k in range(100):
                            body = b"child %d call %d" % (c, k)
                            if own.call(ferry.Message(k, body), LIMIT).body != body:
                                code = 3
            finally:
                os._exit(code)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    assert codes == [0, 0], "each child: 1 = its call went through, 2 = failed otherwise, 3 = own connection's wrong reply"
    for k in range(100):
        body = b"parent call %d" % k
        assert conn.call(ferry.Message(k, body), LIMIT).body == body
    conn.close()
    tx.close()
    thread.join(LIMIT)
    assert not thread.is_alive()
    server.close()


def test_handles_copied_by_a_fork_python_does_not_see_refuse_at_once_in_the_child():
    """A fork made outside Python (the C library's ``fork`` called through
    ``ctypes``, as a C extension would) runs no ``os.register_at_fork``
    hooks. The child's copies of a connection and of a server are still
    the parent's: a call is refused with ``RpcError`` before its request
    is taken, and the server's ``reply_and_wait``, whose lock the parent's
    serving thread held at the fork, is refused at once instead of waiting
    for that lock for ever."""
    import ctypes
    import os
    import threading

    rx, tx = ferry.port()
    server = ferry.RpcServer(rx, "block")

    def serve() -> None:
        reply = None
        while True:
            try:
                conn, req = server.reply_and_wait(reply, LIMIT)
            except ferry.FerryError:
                return
            reply = (conn, ferry.Message(req.op + 1, req.body))

    thread = threading.Thread(target=serve)
    thread.start()
    conn = ferry.Connection(tx, "block", LIMIT)
    assert conn.call(ferry.Message(1, b"parent"), LIMIT).body == b"parent"
    # PyDLL keeps the GIL across the call, so the child has it.
    pid = ctypes.PyDLL(None).fork()
    if pid == 0:
        code = 0
        try:
            # A child still waiting here is killed: the parent sees a signal.
            import signal

            signal.alarm(10)
            request = ferry.Message(2, b"child")
            try:
                conn.call(request, LIMIT)
                code |= 1
            except ferry.RpcError:
                if request.sent:
                    code |= 2
            try:
                server.reply_and_wait(None, 1)
                code |= 4
            except ferry.RpcTimeout:
                code |= 8
            except ferry.RpcError:
                pass
        finally:
            os._exit(code)
    status = os.waitpid(pid, 0)[1]
    assert os.WIFEXITED(status), f"the child hung and was killed by signal {os.WTERMSIG(status)} (its server waited for its parent's lock)"
    assert os.WEXITSTATUS(status) == 0, "1 = call went through, 2 = refused after taking its request, 4 = served, 8 = server timed out"
    for k in range(20):
        body = b"parent call %d" % k
        assert conn.call(ferry.Message(k, body), LIMIT).body == body
    conn.close()
    tx.close()
    thread.join(LIMIT)
    assert not thread.is_alive()
    server.close()
