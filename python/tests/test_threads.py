"""Handles shared between threads: while one thread blocks in a call on a
handle (an RPC call, a send on a full queue, a receive), another thread's
use of the same handle waits for it without holding the GIL, so every
other Python thread keeps running (and can be the one that lets the
blocked call finish). Nothing here is timed: a frozen interpreter shows as
the blocked call timing out instead of succeeding."""

from __future__ import annotations

import threading
import time

import ferry
from conftest import LIMIT


def _in_thread(f) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(f())
        except Exception as e:  # noqa: BLE001 - the test looks at what it was
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _blocked_in(started: threading.Event, f) -> tuple[threading.Thread, list]:
    """Runs `f` in a thread and returns once it is (very likely) blocked
    in it: a thread that held the GIL while waiting would stop this one
    here."""

    def run():
        started.set()
        return f()

    t, out = _in_thread(run)
    assert started.wait(LIMIT)
    time.sleep(0.2)
    return t, out


def test_a_connection_in_a_call_can_be_asked_about_from_another_thread():
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    go_rx, go_tx = ferry.port()
    got_request = threading.Event()

    def serve() -> str:
        conn, req = server.reply_and_wait(None, LIMIT)
        got_request.set()
        go_rx.recv(LIMIT)  # answers only when the main thread says so
        server.reply(conn, ferry.Message(req.op + 1, b"answer"))
        return "served"

    server_thread, served = _in_thread(serve)
    conn = ferry.Connection(tx, policy="block", timeout=LIMIT)
    caller, reply = _in_thread(lambda: conn.call(ferry.Message(1), LIMIT / 2))
    assert got_request.wait(LIMIT)
    asker, open_ = _blocked_in(threading.Event(), lambda: conn.is_open)
    go_tx.send(ferry.Message(0))
    for t in (caller, asker, server_thread):
        t.join(LIMIT * 2)
    assert not isinstance(reply[0], Exception), f"the call failed while another thread asked about its connection: {reply[0]!r}"
    assert (reply[0].op, reply[0].body) == (2, b"answer")
    assert open_ == [True] and served == ["served"]
    conn.close()
    server.close()


def test_a_send_right_blocked_on_a_full_queue_can_be_closed_from_another_thread():
    rx, tx = ferry.port(queue_limit=4096)
    filler = tx.clone()
    while True:
        try:
            filler.send(ferry.Message(0, bytes(1024)), 0)
        except ferry.QueueFull:
            break
    sender, sent = _in_thread(lambda: tx.send(ferry.Message(1, bytes(1024)), LIMIT / 2))
    time.sleep(0.2)
    closer, closed = _blocked_in(threading.Event(), tx.close)
    drained = []
    while True:  # only this thread can make room for the blocked send
        try:
            m = rx.recv(LIMIT if sender.is_alive() else 0)
        except ferry.RecvTimeout:
            break
        drained.append(m.op)
        if m.op == 1:
            break
    for t in (sender, closer):
        t.join(LIMIT * 2)
    assert sent == [None], f"the send failed while another thread closed its right: {sent[0]!r}"
    assert closed == [None] and tx.closed and drained[-1] == 1
    filler.close()

