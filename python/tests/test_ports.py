"""Ports, rights and messages: in one process and across processes."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import ferry
from conftest import LIMIT, finish, spawn_python, unique


def test_message_carries_op_body_and_kernel_credentials():
    rx, tx = ferry.port()
    tx.send(ferry.Message(7, b"hello"))
    m = rx.recv(LIMIT)
    assert (m.op, m.body, m.items) == (7, b"hello", [])
    assert m.sender == (os.getpid(), os.getuid(), os.getgid())
    assert not m.via_send_once


def test_send_right_passed_in_a_message_reaches_another_process(names):
    name = unique("echo")
    peer = spawn_python("echo", name)
    to_echo = _lookup(names, name)
    mine, right = ferry.port()
    to_echo.send(ferry.Message(1).add(right.clone()))
    greeting = mine.recv(LIMIT)
    assert (greeting.op, greeting.body) == (7, b"hello from echo")
    assert greeting.sender[0] == peer.pid
    to_echo.send(ferry.Message(99))
    assert "echo: stop" in finish(peer)


def test_send_once_reply_from_another_process(names):
    name = unique("echo")
    peer = spawn_python("echo", name)
    to_echo = _lookup(names, name)
    rx, _keep = ferry.port()
    once = rx.make_send_once()
    assert rx.send_once_outstanding == 1
    to_echo.send(ferry.Message(41, b"abc").set_reply(once))
    assert once.closed, "the reply right moved into the message"
    reply = rx.recv(LIMIT)
    assert (reply.op, reply.body, reply.via_send_once) == (42, b"cba", True)
    assert rx.send_once_outstanding == 0
    to_echo.send(ferry.Message(99))
    finish(peer)


def test_reply_pair_gets_a_reply_from_another_process_or_hears_it_dropped(names):
    name = unique("echo")
    peer = spawn_python("echo", name)
    to_echo = _lookup(names, name)
    answer, once = ferry.reply_pair()
    with pytest.raises(ferry.RecvTimeout):
        answer.try_recv()
    to_echo.send(ferry.Message(41, b"abc").set_reply(once))
    assert once.closed, "the reply right moved into the message"
    reply = answer.recv(LIMIT)
    assert (reply.op, reply.body, reply.via_send_once, answer.done) == (42, b"cba", True, True)
    with pytest.raises(ferry.NoSenders):
        answer.recv(0)
    # A right destroyed unused is heard; a closed receiver refuses use.
    answer, once = ferry.reply_pair()
    once.close()
    with pytest.raises(ferry.SendOnceDropped):
        answer.recv(LIMIT)
    answer.close()
    with pytest.raises(ValueError):
        answer.recv(0)
    # A reply right whose receiver is gone fails to send.
    answer, once = ferry.reply_pair()
    answer.close()
    with pytest.raises(ferry.PeerDead):
        once.send(ferry.Message(1))
    to_echo.send(ferry.Message(99))
    finish(peer)


def test_dead_name_and_no_senders_across_processes(names):
    name = unique("hold")
    rx, tx = ferry.port()
    names.register(name, tx)
    peer = spawn_python("hold-receive", name)
    (theirs,) = rx.recv(LIMIT).items
    assert isinstance(theirs, ferry.SendRight) and not theirs.is_dead
    theirs.send(ferry.Message(99))
    finish(peer)
    assert theirs.wait_dead(LIMIT)
    with pytest.raises(ferry.PeerDead) as e:
        theirs.send(ferry.Message(1))
    assert isinstance(e.value, ferry.SendError) and isinstance(e.value, BrokenPipeError)
    tx.close()
    names.unregister(name)


def test_errors_are_typed_per_family():
    rx, tx = ferry.port(queue_limit=4096)
    with pytest.raises(ferry.RecvTimeout) as e:
        rx.recv(0)
    assert isinstance(e.value, ferry.RecvError) and isinstance(e.value, TimeoutError)
    with pytest.raises(ferry.MessageTooLarge):
        tx.send(ferry.Message(1, bytes(ferry.MAX_INLINE + 1)))
    with pytest.raises(ferry.QueueFull):
        for _ in range(10_000):
            tx.send(ferry.Message(1, bytes(1024)), timeout=0)
    with pytest.raises(ferry.SendTimeout):
        tx.send(ferry.Message(1, bytes(1024)), timeout=0.01)
    while True:
        try:
            rx.recv(0)
        except ferry.RecvTimeout:
            break
    tx.close()
    with pytest.raises(ferry.NoSenders):
        rx.recv(LIMIT)


def _fill(tx: ferry.SendRight) -> None:
    with pytest.raises(ferry.QueueFull):
        for _ in range(10_000):
            tx.send(ferry.Message(0, bytes(1024)), timeout=0)


def _drain(rx: ferry.ReceiveRight) -> None:
    for _ in range(10_000):
        try:
            rx.recv(0)
        except ferry.RecvTimeout:
            return


def test_a_failed_send_leaves_its_message_whole():
    """A send that fails sent nothing and leaves the message as it was,
    rights, regions and reply right inside, to send again (after
    ``QueueFull`` or ``SendTimeout``) or elsewhere (after ``PeerDead``),
    as in Rust and C; through a send-once right or as a reply, the right
    stays too. A receive right in the message was the only one of its
    port: losing it would destroy the port."""
    rx, tx = ferry.port(queue_limit=4096)
    precious_rx, precious_tx = ferry.port()
    answer_rx, answer_tx = ferry.port()
    region = ferry.Region(4096)
    memoryview(region)[:5] = b"whole"
    m = ferry.Message(7, b"body").add(precious_rx).add(region).set_reply(answer_rx.make_send_once())
    _fill(tx)
    for timeout in (0, 0.01):
        with pytest.raises((ferry.QueueFull, ferry.SendTimeout)):
            tx.send(m, timeout)
        assert not m.sent, f"timeout {timeout}"
    dead_rx, dead_tx = ferry.port()
    dead_rx.close()
    with pytest.raises(ferry.PeerDead):
        dead_tx.send(m)
    assert not m.sent

    gone, once = ferry.reply_pair()
    gone.close()
    with pytest.raises(ferry.PeerDead):
        once.send(m, 0)
    assert not m.sent and not once.closed

    _drain(rx)
    tx.send(ferry.Message(8).set_reply(tx.clone()))
    request = rx.recv(LIMIT)
    _fill(tx)
    with pytest.raises(ferry.QueueFull):
        request.reply(m, 0)
    assert not m.sent
    _drain(rx)
    request.reply(m, 0)
    assert m.sent
    got = rx.recv(LIMIT)
    assert (got.op, got.body) == (7, b"body")
    moved, item = got.items
    assert item.copy_out()[:5] == b"whole"
    precious_tx.send(ferry.Message(9))
    assert moved.recv(LIMIT).op == 9, "the receive right travelled whole"
    got.take_reply().send(ferry.Message(10))
    assert answer_rx.recv(LIMIT).op == 10


def test_a_send_given_a_timeout_ends_in_send_timeout_however_short():
    """A send given a timeout that ends while the queue is full raises
    ``SendTimeout``, also when the time left for its last wait rounds to
    nothing; ``QueueFull`` is for ``timeout=0``."""
    rx, tx = ferry.port(queue_limit=4096)
    with pytest.raises(ferry.QueueFull):
        for _ in range(10_000):
            tx.send(ferry.Message(1, bytes(1024)), timeout=0)
    for t in (1e-9, 1e-6, 0.01):
        with pytest.raises(ferry.SendTimeout):
            tx.send(ferry.Message(1, bytes(1024)), timeout=t)


def test_timeouts_too_long_for_a_clock_wait_like_none():
    """A timeout longer than any clock counts (1e19 seconds, the largest
    float) waits as long as it takes, as ``None`` and ``math.inf`` do: the
    calls below have their answer at once and return it."""
    import sys

    for t in (1e19, 1e300, sys.float_info.max):
        rx, tx = ferry.port()
        tx.send(ferry.Message(1, b"queued"), timeout=t)
        assert rx.recv(t).body == b"queued"
        answer, once = ferry.reply_pair()
        once.send(ferry.Message(2), timeout=t)
        assert answer.recv(t).op == 2
        ps = ferry.PortSet()
        member = ps.insert(rx)
        tx.send(ferry.Message(3))
        ev = ps.wait(t)
        assert (ev.kind, ev.member, ev.message.op) == ("message", member, 3)
        ps.close()
        assert tx.wait_dead(t)
    with pytest.raises(ValueError):
        ferry.port()[0].recv(float("nan"))


def test_a_message_in_use_by_another_call_is_refused_with_value_error():
    """A message cannot answer itself, and one another thread is replying
    to (blocked on a full queue) cannot be sent meanwhile: ``ValueError``,
    not a panic; the messages stay usable."""
    rx, tx = ferry.port()
    tx.send(ferry.Message(1).set_reply(rx.make_send_once()))
    m = rx.recv(LIMIT)
    with pytest.raises(ValueError):
        m.reply(m)
    m.reply(ferry.Message(2))
    assert rx.recv(LIMIT).op == 2

    full_rx, full_tx = ferry.port(queue_limit=4096)
    with pytest.raises(ferry.QueueFull):
        for _ in range(10_000):
            full_tx.send(ferry.Message(0, bytes(1024)), timeout=0)
    tx.send(ferry.Message(3).set_reply(full_tx.clone()))
    request = rx.recv(LIMIT)
    replying = threading.Thread(target=request.reply, args=(ferry.Message(4, bytes(1024)), LIMIT))
    replying.start()
    for _ in range(30_000):  # until the other thread is inside reply()
        try:
            request.op
        except RuntimeError:
            break
        time.sleep(0.001)
    else:
        pytest.fail("the replying thread never started its reply")
    with pytest.raises(ValueError):
        tx.send(request)
    with pytest.raises(ValueError):
        ferry.reply_pair()[1].send(request)
    for _ in range(100):
        if full_rx.recv(LIMIT).op == 4:
            break
    replying.join(LIMIT)
    assert not replying.is_alive()
    tx.send(request)
    assert rx.recv(LIMIT).op == 3


def test_used_and_closed_handles_refuse_with_value_error():
    rx, tx = ferry.port()
    m = ferry.Message(1)
    tx.send(m)
    assert m.sent
    with pytest.raises(ValueError):
        tx.send(m)
    moved = tx.clone()
    ferry.Message(2).add(moved)
    with pytest.raises(ValueError):
        moved.send(ferry.Message(3))
    with tx:
        pass
    assert tx.closed
    with pytest.raises(ValueError):
        tx.send(ferry.Message(4))
    with pytest.raises(TypeError):
        ferry.Message(5).add(object())
    # A failed precondition uses nothing up: the message and the right stay.
    kept = ferry.Message(6)
    with pytest.raises(ValueError):
        tx.send(kept)
    assert not kept.sent
    once = rx.make_send_once()
    with pytest.raises(ValueError):
        once.send(m)
    assert not once.closed
    once.send(kept)
    assert sorted(rx.recv(LIMIT).op for _ in range(2)) == [1, 6]


def test_receive_right_moves_with_its_queue():
    rx, tx = ferry.port()
    tx.send(ferry.Message(1, b"queued before the move"))
    carrier_rx, carrier_tx = ferry.port()
    carrier_tx.send(ferry.Message(2).add(rx))
    assert rx.closed
    (moved,) = carrier_rx.recv(LIMIT).items
    assert isinstance(moved, ferry.ReceiveRight)
    assert moved.recv(LIMIT).body == b"queued before the move"
    tx.send(ferry.Message(3))
    assert moved.recv(LIMIT).op == 3


def test_ctrl_c_interrupts_a_blocking_receive():
    rx, _tx = ferry.port()
    # SIGINT is sent again and again until the receive ends, and raises only
    # while armed, so neither a slow start of recv nor a late signal can
    # interrupt anything but the receive under test.
    armed = threading.Event()
    armed.set()

    def on_sigint(signum, frame):
        if armed.is_set():
            raise KeyboardInterrupt

    def poke():
        while armed.wait(0) and not done.wait(0.05):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    done = threading.Event()
    previous = signal.signal(signal.SIGINT, on_sigint)
    poker = threading.Thread(target=poke)
    try:
        with pytest.raises(KeyboardInterrupt):
            poker.start()
            try:
                rx.recv()  # no timeout: only the signal can end it
            finally:
                armed.clear()
                done.set()
        poker.join(LIMIT)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_send_once_dropped_unused_is_reported():
    rx, tx = ferry.port()
    once = rx.make_send_once()
    once.close()
    with pytest.raises(ferry.SendOnceDropped):
        rx.recv(LIMIT)


def test_blocking_receive_releases_the_gil():
    rx, tx = ferry.port()
    got = []
    t = threading.Thread(target=lambda: got.append(rx.recv(LIMIT).op))
    t.start()
    # If recv held the GIL, this thread could not run until it timed out.
    tx.send(ferry.Message(5))
    t.join(LIMIT * 2)
    assert got == [5]


def test_port_set_delivers_messages_and_notifications():
    with ferry.PortSet() as ps:
        a, to_a = ferry.port()
        b, to_b = ferry.port()
        c_rx, c_tx = ferry.port()
        ia, ib = ps.insert(a), ps.insert(b)
        assert a.closed and len(ps) == 2
        wc = ps.watch_dead_name(c_tx)
        to_a.send(ferry.Message(1))
        to_b.send(ferry.Message(2))
        got = sorted((e.member, e.message.op) for e in (ps.wait(LIMIT), ps.wait(LIMIT)))
        assert got == [(ia, 1), (ib, 2)]
        once = ps.make_send_once(ia)
        once.send(ferry.Message(3))
        e = ps.wait(LIMIT)
        assert (e.kind, e.member, e.message.via_send_once) == ("message", ia, True)
        to_b.close()
        e = ps.wait(LIMIT)
        assert (e.kind, e.member) == ("no-senders", ib)
        c_rx.close()
        e = ps.wait(LIMIT)
        assert (e.kind, e.member) == ("dead-name", wc)
        back = ps.remove(ia)
        to_a.send(ferry.Message(4))
        assert back.recv(LIMIT).op == 4


def test_port_set_watch_stops_and_lets_the_port_see_no_senders():
    with ferry.PortSet() as ps:
        rx, tx = ferry.port()
        w = ps.watch_dead_name(tx)
        tx.close()
        # The watch's own copy of the right is a sender while it lasts.
        with pytest.raises(ferry.RecvTimeout):
            rx.recv(0.02)
        ps.unwatch(w)
        with pytest.raises(KeyError):
            ps.unwatch(w)
        with pytest.raises(ferry.NoSenders):
            rx.recv(LIMIT)
        rx.close()
        with pytest.raises(ferry.RecvTimeout):
            ps.wait(0.02)
        p, to_p = ferry.port()
        ip = ps.insert(p)
        with pytest.raises(KeyError):
            ps.unwatch(ip)
        to_p.send(ferry.Message(5))
        e = ps.wait(LIMIT)
        assert (e.kind, e.member, e.message.op) == ("message", ip, 5)


def test_names_register_lookup_list(names):
    name = unique("names")
    rx, tx = ferry.port()
    names.register(name, tx)
    with pytest.raises(ferry.NameTaken):
        names.register(name, tx)
    found = names.lookup(name)
    found.send(ferry.Message(9))
    assert rx.recv(LIMIT).op == 9
    assert any(e["name"] == name and e["owner_pid"] == os.getpid() for e in names.list())
    names.unregister(name)
    with pytest.raises(ferry.NameNotFound) as e:
        names.lookup(name)
    assert isinstance(e.value, LookupError)
    with pytest.raises(ferry.InvalidName):
        names.lookup("")


def test_a_client_started_first_waits_for_its_servers_name(names):
    name = unique("later")
    peer = spawn_python("hold-receive", name)  # looks the name up before it exists
    threading.Event().wait(0.2)
    rx, tx = ferry.port()
    names.register(name, tx)
    hello = rx.recv(LIMIT)
    (to_peer,) = hello.items
    to_peer.send(ferry.Message(99))
    assert "hold: stop" in finish(peer)
    assert names.lookup_wait(name, 0).send(ferry.Message(5)) is None
    assert rx.recv(LIMIT).op == 5
    names.unregister(name)
    for timeout in (0, 0.05):
        with pytest.raises(ferry.NameNotFound):
            names.lookup_wait(name, timeout)
    with pytest.raises(ferry.InvalidName):
        names.lookup_wait("", 1)


def test_system_names_are_registered_by_root_alone(names):
    name = unique("system")
    rx, tx = ferry.port()
    if os.geteuid() != 0:
        with pytest.raises(ferry.NameDenied):
            names.register_system(name, tx)
        return
    names.register_system(name, tx)
    with pytest.raises(ferry.NameTaken):
        names.register_system(name, tx)
    names.lookup(name).send(ferry.Message(10))
    assert rx.recv(LIMIT).op == 10
    # Listed as the system's (uid 2**32 - 1), not as root's.
    assert any(e["name"] == name and e["uid"] == 2**32 - 1 for e in names.list())
    # The name goes with its port.
    rx.close()
    tx.close()
    for _ in range(400):
        try:
            names.lookup(name)
        except ferry.NameNotFound:
            break
        threading.Event().wait(0.01)
    else:
        raise AssertionError("the system name outlived its port")


def test_system_services_hand_each_lookup_a_port_of_its_own(names):
    name = unique("service")
    main, tx = ferry.port()
    if os.geteuid() != 0:
        with pytest.raises(ferry.NameDenied):
            names.register_system_service(name, tx)
        return
    names.register_system_service(name, tx)
    with pytest.raises(ferry.NameTaken):
        names.register_system_service(name, tx)
    served = ferry.PortSet()
    owner = {}
    first, second = names.lookup(name), names.lookup(name)
    for _ in range(2):
        m = main.recv(LIMIT)
        assert m.op == ferry.SERVICE_PORT
        taken = m.take_service_port()
        assert taken is not None, "the name server's message is a service port"
        uid, port = taken
        assert uid == 0 and m.items == []
        owner[served.insert(port)] = uid
    # Each lookup reached a port of its own.
    first.send(ferry.Message(1))
    second.send(ferry.Message(2))
    got = {}
    for _ in range(2):
        ev = served.wait(LIMIT)
        got[ev.message.op] = ev.member
    assert set(got) == {1, 2} and got[1] != got[2] and set(got.values()) == set(owner)
    # The same shape with a reply right is not the name server's, and is
    # left whole; so is anything after its items were read.
    fake_rx, fake_tx = ferry.port()
    _answer, once = ferry.reply_pair()
    forged = ferry.Message(ferry.SERVICE_PORT, (0).to_bytes(4, "little")).add(fake_rx).add(fake_tx).set_reply(once)
    tx.send(forged)
    m = main.recv(LIMIT)
    assert m.take_service_port() is None
    assert len(m.items) == 2
    with pytest.raises(ValueError):
        m.take_service_port()
    assert ferry.Message(5).take_service_port() is None
    first.close()
    ev = served.wait(LIMIT)
    assert ev.kind == "no-senders" and ev.member == got[1]


def _lookup(names: ferry.Bootstrap, name: str) -> ferry.SendRight:
    for _ in range(4000):
        try:
            return names.lookup(name)
        except ferry.NameNotFound:
            threading.Event().wait(0.005)
    raise AssertionError(f"{name} never registered")
