"""asyncio: awaiting ports and port sets without blocking the loop."""

from __future__ import annotations

import asyncio

import pytest

import ferry
from conftest import LIMIT, finish, spawn_python, unique
from test_ports import _lookup


def test_recv_async_gets_a_reply_from_another_process(names):
    name = unique("echo")
    peer = spawn_python("echo", name)
    to_echo = _lookup(names, name)

    async def main():
        rx, _keep = ferry.port()
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        # The descriptor is taken before the send-once right exists: the
        # helper must pick up the new right when it asks again.
        rx.fileno()
        to_echo.send(ferry.Message(10, b"xy").set_reply(rx.make_send_once()))
        reply = await ferry.recv_async(rx, timeout=LIMIT)
        t.cancel()
        return reply, ticks

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
