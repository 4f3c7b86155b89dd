"""asyncio: awaiting ports and port sets without blocking the loop."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

import ferry
from conftest import LIMIT, finish, spawn_python, spawn_rust, unique
from test_ports import _lookup


class _Ticker:
    """Counts the event loop's turns, as a task of its own, while the
    ``async with`` block runs: a count above zero shows that what the block
    awaited let the loop run other tasks."""

    def __init__(self, pause: float = 0) -> None:
        self.ticks = 0
        self._pause = pause
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(self._pause)

    async def __aenter__(self) -> _Ticker:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def test_recv_async_gets_a_reply_from_another_process(names):
    name = unique("echo")
    peer = spawn_python("echo", name)
    to_echo = _lookup(names, name)

    async def main():
        rx, _keep = ferry.port()
        async with _Ticker() as ticker:
            # The descriptor is taken before the send-once right exists:
            # the helper must pick up the new right when it asks again.
            rx.fileno()
            to_echo.send(ferry.Message(10, b"xy").set_reply(rx.make_send_once()))
            reply = await ferry.recv_async(rx, timeout=LIMIT)
        return reply, ticker.ticks

    reply, ticks = asyncio.run(main())
    assert (reply.op, reply.body, reply.via_send_once) == (11, b"yx", True)
    assert ticks > 0, "the event loop kept running while the port was awaited"
    to_echo.send(ferry.Message(99))
    finish(peer)


def test_recv_async_awaits_a_reply_pair(names):
    name = unique("echo")
    peer = spawn_python("echo", name)
    to_echo = _lookup(names, name)

    async def main():
        answer, once = ferry.reply_pair()
        with pytest.raises(ferry.RecvTimeout):
            await ferry.recv_async(answer, timeout=0.05)
        to_echo.send(ferry.Message(10, b"xy").set_reply(once))
        return await ferry.recv_async(answer, timeout=LIMIT)

    reply = asyncio.run(main())
    assert (reply.op, reply.body, reply.via_send_once) == (11, b"yx", True)
    to_echo.send(ferry.Message(99))
    finish(peer)


def test_recv_async_times_out_and_reports_no_senders():
    async def main():
        rx, tx = ferry.port()
        with pytest.raises(ferry.RecvTimeout):
            await ferry.recv_async(rx, timeout=0.05)
        asyncio.get_running_loop().call_later(0.01, tx.close)
        with pytest.raises(ferry.NoSenders):
            await ferry.recv_async(rx, timeout=LIMIT)

    asyncio.run(main())


def test_wait_async_on_a_port_set():
    async def main():
        ps = ferry.PortSet()
        a, to_a = ferry.port()
        ia = ps.insert(a)
        asyncio.get_running_loop().call_soon(lambda: to_a.send(ferry.Message(5)))
        e = await ferry.wait_async(ps, timeout=LIMIT)
        return e.kind, e.member == ia, e.message.op

    assert asyncio.run(main()) == ("message", True, 5)


def test_tasks_awaiting_one_port_each_get_a_message():
    async def main():
        rx, tx = ferry.port()
        ps = ferry.PortSet()
        member_rx, member_tx = ferry.port()
        ps.insert(member_rx)

        async def receive() -> int:
            return (await ferry.recv_async(rx, timeout=LIMIT / 3)).op

        async def wait() -> int:
            return (await ferry.wait_async(ps, timeout=LIMIT / 3)).message.op

        tasks = [asyncio.create_task(receive()) for _ in range(3)] + [asyncio.create_task(wait()) for _ in range(2)]
        await asyncio.sleep(0.1)  # every task waits on its descriptor by now
        for op in (10, 11, 12):
            tx.send(ferry.Message(op))
        for op in (20, 21):
            member_tx.send(ferry.Message(op))
        return await asyncio.gather(*tasks, return_exceptions=True)

    got = asyncio.run(main())
    assert not [g for g in got if isinstance(g, BaseException)], f"a task waiting beside others got no message: {got}"
    assert sorted(got[:3]) == [10, 11, 12], got
    assert sorted(got[3:]) == [20, 21], got


def test_a_port_closed_under_a_waiting_task_leaves_its_descriptor_number_usable():
    """A task awaiting a port that is closed meanwhile must not leave the
    loop watching a descriptor number the kernel no longer watches: a later
    port given that number (the kernel hands out the lowest free one) is
    heard when a message arrives."""

    async def main() -> int:
        rx, tx = ferry.port()
        stranded = asyncio.create_task(ferry.recv_async(rx))
        await asyncio.sleep(0.05)  # waiting on the descriptor by now
        number = rx.fileno()
        rx.close()
        tx.close()
        kept = []
        for _ in range(50):
            rx2, tx2 = ferry.port()
            if rx2.fileno() == number:
                break
            kept.append((rx2, tx2))
        else:
            pytest.fail(f"no new port was given descriptor {number} again")
        waiting = asyncio.create_task(ferry.recv_async(rx2, timeout=10))
        await asyncio.sleep(0.05)
        tx2.send(ferry.Message(7))
        try:
            return (await waiting).op
        finally:
            stranded.cancel()
            with contextlib.suppress(asyncio.CancelledError, ValueError):
                await stranded

    assert asyncio.run(main()) == 7


def test_a_task_awaiting_a_handle_closed_under_it_gets_value_error():
    """A task awaiting a port, a port set, an RPC server or a call whose
    handle another task closes raises ``ValueError``, as a blocking call
    in another thread does, instead of waiting for ever on a descriptor
    nothing will make ready again."""
    import threading

    def answered_never() -> tuple[ferry.RpcServer, ferry.Connection, threading.Event]:
        # A server that accepts one connection and never answers its call.
        rx, tx = ferry.port()
        server = ferry.RpcServer(rx, "block")
        done = threading.Event()

        def accept() -> None:
            with contextlib.suppress(ferry.FerryError, ValueError):
                server.reply_and_wait(None, LIMIT)  # takes the call, never answers
            done.wait(LIMIT)

        threading.Thread(target=accept, daemon=True).start()
        return server, ferry.Connection(tx, "block", LIMIT), done

    async def main() -> list[str]:
        rx, _tx = ferry.port()
        ps = ferry.PortSet()
        member_rx, _member_tx = ferry.port()
        ps.insert(member_rx)
        rpc_rx, _rpc_tx = ferry.port()
        server = ferry.RpcServer(rpc_rx)
        other, conn, done = answered_never()
        waits = {
            "recv_async": (ferry.recv_async(rx), rx),
            "wait_async": (ferry.wait_async(ps), ps),
            "reply_and_wait_async": (ferry.reply_and_wait_async(server), server),
            "call_async": (ferry.call_async(conn, ferry.Message(1)), conn),
        }
        tasks = {name: asyncio.create_task(w) for name, (w, _) in waits.items()}
        await asyncio.sleep(0.2)  # every task waits on its descriptor by now
        for _, handle in waits.values():
            handle.close()
        got = []
        for name, task in tasks.items():
            try:
                await asyncio.wait_for(task, 10)
                got.append(f"{name}: returned")
            except ValueError:
                got.append(f"{name}: ValueError")
            except asyncio.TimeoutError:
                got.append(f"{name}: still waiting")
        done.set()
        other.close()
        return got

    assert asyncio.run(main()) == [f"{name}: ValueError" for name in ("recv_async", "wait_async", "reply_and_wait_async", "call_async")]


def test_an_rpc_server_serves_calls_inside_the_event_loop():
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)
    calls = 20
    answers = []

    def client() -> None:
        with ferry.Connection(tx, timeout=LIMIT) as conn:
            for i in range(calls):
                if i % 5 == 0:
                    # The server waits for this call: a loop that runs
                    # other tasks meanwhile ticks. Without a pause every
                    # request could be waiting already, so that the
                    # server never waits and the ticker never gets a turn.
                    time.sleep(0.05)
                answers.append(conn.call(ferry.Message(i, b"x" * i), LIMIT).op)

    async def main() -> int:
        async with _Ticker(pause=0.001) as ticker:
            reply = None
            for _ in range(calls):
                conn, req = await ferry.reply_and_wait_async(server, reply, timeout=LIMIT)
                assert req.body == b"x" * req.op
                reply = (conn, ferry.Message(req.op + 100))
            server.reply(*reply)
        return ticker.ticks

    import threading

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    try:
        ticks = asyncio.run(main())
    finally:
        server.close()  # a failed test's client then fails at once
    thread.join(LIMIT)
    assert answers == [i + 100 for i in range(calls)]
    assert ticks > 0, "the event loop was blocked while the server waited"


def test_call_async_calls_a_server_in_another_process(names):
    name = unique("rpc")
    calls = 30
    peer = spawn_python("rpc-server", name, str(calls))
    to_server = _lookup(names, name)

    async def main() -> tuple[list[tuple[int, bytes]], int]:
        async def one(i: int) -> tuple[int, bytes]:
            reply = await ferry.call_async(conn, ferry.Message(i, f"call {i}".encode()), timeout=LIMIT)
            return reply.op, reply.body

        async with _Ticker() as ticker:
            conn = await ferry.connect_async(to_server, policy="block", timeout=LIMIT)
            got = [await one(i) for i in range(calls // 2)]
            # Tasks calling on one connection take turns; each gets its own
            # reply.
            got += await asyncio.gather(*(one(i) for i in range(calls // 2, calls)))
        conn.close()
        return got, ticker.ticks

    got, ticks = asyncio.run(main())
    assert got == [(i + 1, f"CALL {i}".encode()) for i in range(calls)]
    assert ticks > 0, "the event loop kept running while calls were awaited"
    assert f"served {calls}" in finish(peer)


def test_tasks_calling_on_one_connection_take_turns_in_each_event_loop_it_meets(names):
    # A script or a test suite runs one event loop after another
    # (`asyncio.run` each time) with the same connection; in each, several
    # tasks call at once, so all but the first wait for their turn (each
    # call takes the server 20 ms: ferry-peer's op 2).
    name = unique("rpc")
    peer = spawn_rust("rpc-server", name, "block", "1")
    assert peer.stdout.readline().strip() == "ready"
    to_server = _lookup(names, name)
    conn = ferry.Connection(to_server, "block", LIMIT)
    rounds, tasks = 3, 4

    async def main(r: int) -> list[bytes]:
        async def one(i: int) -> bytes:
            request = ferry.Message(2, (20).to_bytes(4, "little") + f"call {i}".encode())
            return (await ferry.call_async(conn, request, timeout=LIMIT)).body

        return await asyncio.gather(*(one(r * tasks + i) for i in range(tasks)))

    for r in range(rounds):
        got = asyncio.run(main(r))
        assert got == [f"call {i}".encode() for i in range(r * tasks, (r + 1) * tasks)], f"event loop {r + 1}"
    assert conn.call(ferry.Message(7), LIMIT).op == 7
    conn.close()
    finish(peer)


def test_call_async_times_out_and_the_late_reply_is_discarded(names):
    # ferry-peer's server: op 1 echoes, op 2 sleeps the milliseconds its
    # body starts with, then answers the rest; op 7 ends it.
    name = unique("rpc")
    peer = spawn_rust("rpc-server", name, "adaptive", "1")
    assert peer.stdout.readline().strip() == "ready"
    to_server = _lookup(names, name)

    async def main() -> None:
        conn = await ferry.connect_async(to_server, timeout=LIMIT)
        with pytest.raises(ferry.RpcTimeout):
            await ferry.call_async(conn, ferry.Message(2, (300).to_bytes(4, "little") + b"late"), timeout=0.05)
        reply = await ferry.call_async(conn, ferry.Message(1, b"mine"), timeout=LIMIT)
        assert reply.body == b"mine", "a late reply leaked into the next call"
        # Past the slot (a larger body goes over the connection's socket).
        big = bytes(range(256)) * 64
        assert (await ferry.call_async(conn, ferry.Message(1, big), timeout=LIMIT)).body == big
        assert (await ferry.call_async(conn, ferry.Message(7), timeout=LIMIT)).op == 7
        with pytest.raises(ferry.RpcPeerDead):
            await ferry.call_async(conn, ferry.Message(1, b"gone"), timeout=LIMIT)

    asyncio.run(main())
    finish(peer)


def test_a_client_and_a_server_share_one_event_loop():
    rx, tx = ferry.port()
    server = ferry.RpcServer(rx)

    async def serve() -> None:
        reply = None
        while True:
            try:
                conn, req = await ferry.reply_and_wait_async(server, reply, timeout=LIMIT)
            except ferry.NoClients:
                return
            reply = (conn, ferry.Message(req.op + 1, req.body[::-1]))

    async def main() -> list[bytes]:
        serving = asyncio.create_task(serve())
        conn = await ferry.connect_async(tx, timeout=LIMIT)
        tx.close()
        got = [(await ferry.call_async(conn, ferry.Message(i, b"abc" * i), timeout=LIMIT)).body for i in range(1, 4)]
        conn.close()
        await serving
        return got

    assert asyncio.run(main()) == [b"cba", b"cbacba", b"cbacbacba"]
    server.close()


def test_a_blocking_call_takes_its_turn_after_a_call_awaited_on_its_connection(names):
    # A task awaits a slow call (ferry-peer's op 2: 300 ms) while a blocking
    # call on the same connection is made, from another thread and then from
    # the loop's own thread. Sending the blocking call's request while the
    # awaited one waited abandoned that call, which failed with RpcError;
    # the blocking call takes the awaited call's reply for it first.
    name = unique("rpc")
    peer = spawn_rust("rpc-server", name, "block", "1")
    assert peer.stdout.readline().strip() == "ready"
    to_server = _lookup(names, name)
    conn = ferry.Connection(to_server, "block", LIMIT)

    def slow(tag: bytes) -> ferry.Message:
        return ferry.Message(2, (300).to_bytes(4, "little") + tag)

    async def main() -> list[bytes]:
        awaited = asyncio.create_task(ferry.call_async(conn, slow(b"awaited 1")))
        # With no timeout the task sends its request in its first step.
        await asyncio.sleep(0)
        from_thread = await asyncio.to_thread(conn.call, ferry.Message(1, b"thread"), LIMIT)
        first = await awaited
        awaited = asyncio.create_task(ferry.call_async(conn, slow(b"awaited 2")))
        await asyncio.sleep(0)
        in_loop = conn.call(ferry.Message(1, b"loop"), LIMIT)
        second = await awaited
        return [first.body, from_thread.body, second.body, in_loop.body]

    assert asyncio.run(main()) == [b"awaited 1", b"thread", b"awaited 2", b"loop"]
    assert conn.call(ferry.Message(7), LIMIT).op == 7
    conn.close()
    finish(peer)


def test_an_awaited_call_waits_for_a_blocking_call_of_another_thread_without_blocking_the_loop(names):
    # Another thread's blocking call (ferry-peer's op 2: 800 ms) holds the
    # connection; a task's call on it waits for its turn while the loop
    # runs other tasks. Taking the connection for the request blocked the
    # loop's thread until the other call ended: no other task ran meanwhile.
    import threading

    name = unique("rpc")
    peer = spawn_rust("rpc-server", name, "block", "1")
    assert peer.stdout.readline().strip() == "ready"
    to_server = _lookup(names, name)
    conn = ferry.Connection(to_server, "block", LIMIT)
    calling, called = threading.Event(), threading.Event()
    from_thread: list[bytes] = []

    def blocking() -> None:
        calling.set()
        from_thread.append(conn.call(ferry.Message(2, (800).to_bytes(4, "little") + b"thread"), LIMIT).body)
        called.set()

    async def main() -> tuple[bytes, int]:
        thread = threading.Thread(target=blocking)
        thread.start()
        assert calling.wait(LIMIT)
        await asyncio.sleep(0.2)  # the thread's call has taken the connection
        assert not called.is_set(), "the thread's call ended too soon to test anything"
        ticks_meanwhile = 0

        async def tick() -> None:
            nonlocal ticks_meanwhile
            while True:
                await asyncio.sleep(0.01)
                ticks_meanwhile += not called.is_set()

        ticker = asyncio.create_task(tick())
        reply = await ferry.call_async(conn, ferry.Message(1, b"task"), timeout=LIMIT)
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        await asyncio.to_thread(thread.join, LIMIT)
        return reply.body, ticks_meanwhile

    body, ticks = asyncio.run(main())
    assert (body, from_thread) == (b"task", [b"thread"])
    assert ticks > 0, "the loop ran no other task while the thread's call held the connection"
    assert conn.call(ferry.Message(7), LIMIT).op == 7
    conn.close()
    finish(peer)
