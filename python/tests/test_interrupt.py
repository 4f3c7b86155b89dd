"""Ctrl-C interrupts every blocking call made without a timeout: a Python
process blocked in a receive, an RPC call or a send gets SIGINT and raises
KeyboardInterrupt, and nothing is lost on the way (the message that comes
later is received, the call's late reply is not taken for the next call's,
the unsent message can be sent again). Nothing is timed: a call that
ignored the signal shows as a peer that never says it was interrupted."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import ferry
from conftest import LIMIT, finish, spawn_python, unique
from test_ports import _lookup


def _line(child) -> str:
    # Every line is read this way: `finish` reads the pipe itself and
    # would miss what a buffered read took ahead.
    return child.stdout.readline().strip()


def _interrupt_when_blocked(child) -> None:
    """Waits for the peer's ``ready``, then until its main thread sleeps in
    the kernel (in the blocking call), and sends it SIGINT."""
    assert _line(child) == "ready"
    stat = f"/proc/{child.pid}/task/{child.pid}/stat"
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        with open(stat) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("S", "D"):
            break
        time.sleep(0.01)
    child.send_signal(signal.SIGINT)


def _said(child, what: str) -> None:
    """The peer's next line is ``what``, or the test fails once the
    peer's output ends (a watchdog kills a peer that never answers)."""
    timer = threading.Timer(LIMIT, child.kill)
    timer.start()
    try:
        line = _line(child)
    finally:
        timer.cancel()
    assert line == what, f"the peer said {line!r}, not {what!r} (nothing: it ignored SIGINT and was killed)"


def test_ctrl_c_interrupts_a_receive_without_timeout_and_loses_no_message(names):
    name = unique("interrupt-recv")
    peer = spawn_python("interrupt-recv", name)
    to_peer = _lookup(names, name)
    _interrupt_when_blocked(peer)
    _said(peer, "interrupted in recv")
    to_peer.send(ferry.Message(1, b"after the interrupt"))
    _said(peer, "then received after the interrupt")
    finish(peer)


def test_ctrl_c_interrupts_a_call_to_a_server_that_does_not_answer(names):
    name = unique("interrupt-call")
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    names.register(name, tx)
    peer = spawn_python("interrupt-call", name)
    conn, first = server.reply_and_wait(None, LIMIT)  # accepts, then the call
    assert first.body == b"first"
    _interrupt_when_blocked(peer)
    _said(peer, "interrupted in call")
    # The abandoned call is answered first; its late reply is discarded.
    conn, second = server.reply_and_wait((conn, ferry.Message(1, b"to the first")), LIMIT)
    assert second.body == b"second"
    server.reply(conn, ferry.Message(2, b"to the second"))
    _said(peer, "then the reply to the second")
    finish(peer)
    names.unregister(name)
    server.close()


def test_ctrl_c_interrupts_opening_a_connection_nobody_accepts(names):
    name = unique("interrupt-connect")
    rx, tx = ferry.port()
    names.register(name, tx)
    peer = spawn_python("interrupt-connect", name)
    _interrupt_when_blocked(peer)  # its connect request waits in rx's queue
    _said(peer, "interrupted in connect")
    server = ferry.RpcServer(rx)  # accepts both; the first is gone already
    conn, req = server.reply_and_wait(None, LIMIT)
    assert req.body == b"call"
    server.reply(conn, ferry.Message(4, b"to the call"))
    _said(peer, "then the reply to the call")
    finish(peer)
    names.unregister(name)
    server.close()


def test_ctrl_c_interrupts_a_send_waiting_for_room_and_keeps_the_message():
    peer = spawn_python("interrupt-send")
    _interrupt_when_blocked(peer)
    _said(peer, "interrupted in send")
    _said(peer, "then sent 7 kept")
    finish(peer)


def test_a_call_waits_for_its_one_reply_across_slices():
    # The reply comes after several of the slices in which a call without
    # a timeout waits: the request was sent once, and the reply is the
    # call's.
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    out: list = []

    def client() -> None:
        with ferry.Connection(tx, policy="block", timeout=LIMIT) as conn:
            out.append(conn.call(ferry.Message(1, b"once")).body)

    t = threading.Thread(target=client)
    t.start()
    conn, req = server.reply_and_wait(None, LIMIT)
    assert req.body == b"once"
    time.sleep(0.7)  # several slices of the client's wait pass
    with pytest.raises(ferry.RpcTimeout):
        server.reply_and_wait((conn, ferry.Message(2, b"the reply")), 0.5)  # no second request
    t.join(LIMIT)
    assert out == [b"the reply"]
    server.close()
