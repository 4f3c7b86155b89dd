"""The other process in ferry's Python tests: ``python peer.py ROLE ARGS``.

Each role finds the test through the name service, does one job, prints
what it saw and exits 0 on success (non-zero, with a traceback, otherwise).
Waits are bounded, so a lost message fails instead of hanging.
"""

from __future__ import annotations

import signal
import sys

import ferry

LIMIT = 30.0


def lookup(name: str) -> ferry.SendRight:
    """The send right registered as `name`, waiting for the test to
    register it."""
    with ferry.Bootstrap() as bs:
        try:
            return bs.lookup_wait(name, LIMIT)
        except ferry.NameNotFound:
            raise SystemExit(f"{name} never registered") from None


def sum_array(name: str) -> None:
    """Receives an array of float64 by value, sums it, replies with the sum
    through the request's reply right."""
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    msg = rx.recv(LIMIT)
    n = int.from_bytes(msg.body, "little")
    (item,) = msg.items
    mapped = item.map(immediate=True)
    arr = ferry.ndarray(mapped, "f8", n)
    total = float(arr.sum())
    msg.reply(ferry.Message(2, repr(total).encode()), LIMIT)
    print(f"summed {n} mode={mapped.mode} writeable={arr.flags.writeable}")


def send_array(name: str, n: str) -> None:
    """Sends float64s 0..n by value in a region it filled as an array, then
    overwrites its own copy and reports the receiver's answer."""
    import numpy as np

    count = int(n)
    to = lookup(name)
    rx, me = ferry.port()
    region = ferry.Region(count * 8)
    arr = ferry.ndarray(region, "f8", count)
    arr[:] = np.arange(count, dtype="f8")
    to.send(ferry.Message(1, count.to_bytes(8, "little")).add(region).add(me), LIMIT)
    arr[:] = -1.0  # copy-on-write: the receiver keeps 0..n
    done = rx.recv(LIMIT)
    print(f"sent {count} ack={done.op}")


def echo(name: str) -> None:
    """Answers requests through their reply rights (body reversed, op + 1)
    and greets every send right a request carries; stops on op 99."""
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    while True:
        m = rx.recv(LIMIT)
        if m.op == 99:
            print("echo: stop")
            return
        for it in m.items:
            if isinstance(it, ferry.SendRight):
                it.send(ferry.Message(7, b"hello from echo"), LIMIT)
        if (r := m.take_reply()) is not None:
            r.send(ferry.Message(m.op + 1, m.body[::-1]), LIMIT)


def rpc_server(name: str, calls: str) -> None:
    """Serves `calls` RPC calls: each reply is the request's body
    upper-cased, op + 1."""
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    server = ferry.RpcServer(rx)
    reply = None
    for _ in range(int(calls)):
        conn, req = server.reply_and_wait(reply, LIMIT)
        reply = (conn, ferry.Message(req.op + 1, req.body.upper()))
    server.reply(*reply)
    print(f"served {calls}")


def hold_receive(name: str) -> None:
    """Sends the test a send right to a port of its own, then exits when
    told (op 99), which makes that right a dead name."""
    to = lookup(name)
    rx, tx = ferry.port()
    to.send(ferry.Message(1).add(tx), LIMIT)
    while rx.recv(LIMIT).op != 99:
        pass
    print("hold: stop")


def _blocked(what: str, block) -> None:
    """Prints ``ready``, then blocks in ``block()`` (which has no timeout)
    until Ctrl-C (SIGINT) interrupts it, and says so."""
    # A shell that starts a command in the background leaves SIGINT
    # ignored in it, and Python then keeps it ignored (no
    # KeyboardInterrupt): the peer takes Python's own handler, whatever
    # it inherited, as an interactive program would have.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        print("ready", flush=True)
        block()
    except KeyboardInterrupt:
        print(f"interrupted in {what}", flush=True)
    else:
        raise SystemExit(f"{what} returned instead of waiting")


def interrupt_recv(name: str) -> None:
    """A receive without a timeout, interrupted; then the message the test
    sends afterwards, received on the same port."""
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    _blocked("recv", rx.recv)
    m = rx.recv(LIMIT)
    print(f"then received {m.body.decode()}")


def interrupt_call(name: str) -> None:
    """An RPC call without a timeout to a server that does not answer,
    interrupted; then another call on the same connection, which must get
    its own reply and not the late one of the interrupted call."""
    conn = ferry.Connection(lookup(name), timeout=LIMIT)
    _blocked("call", lambda: conn.call(ferry.Message(1, b"first")))
    reply = conn.call(ferry.Message(2, b"second"), LIMIT)
    print(f"then the reply {reply.body.decode()}")


def interrupt_connect(name: str) -> None:
    """Opening an RPC connection without a timeout to a port nobody serves
    yet, interrupted; then a connection to the same port once it is
    served, and a call on it."""
    to = lookup(name)
    _blocked("connect", lambda: ferry.Connection(to))
    conn = ferry.Connection(to, timeout=LIMIT)
    reply = conn.call(ferry.Message(3, b"call"), LIMIT)
    print(f"then the reply {reply.body.decode()}")


def interrupt_send() -> None:
    """A send without a timeout to a full queue, interrupted; the message
    stays usable and is sent once the queue has room."""
    rx, tx = ferry.port(queue_limit=4096)
    filled = 0
    while True:
        try:
            tx.send(ferry.Message(0, bytes(512)), 0)
            filled += 1
        except ferry.QueueFull:
            break
    msg = ferry.Message(7, b"kept")
    _blocked("send", lambda: tx.send(msg))
    assert not msg.sent, "an interrupted send keeps its message"
    for _ in range(filled):
        assert rx.recv(LIMIT).op == 0
    tx.send(msg, LIMIT)
    m = rx.recv(LIMIT)
    print(f"then sent {m.op} {m.body.decode()}")


ROLES = {
    "sum-array": sum_array,
    "send-array": send_array,
    "echo": echo,
    "rpc-server": rpc_server,
    "hold-receive": hold_receive,
    "interrupt-recv": interrupt_recv,
    "interrupt-call": interrupt_call,
    "interrupt-connect": interrupt_connect,
    "interrupt-send": interrupt_send,
}

if __name__ == "__main__":
    ROLES[sys.argv[1]](*sys.argv[2:])
