"""NumPy arrays by value without copying: filled in a region, sealed on
send, received read-only over the sealed mapping."""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest

import ferry
from conftest import LIMIT, finish, spawn_python, unique
from test_ports import _lookup


def test_array_sent_by_value_is_summed_in_another_process(names):
    n = 1 << 20  # 8 MiB of float64
    name = unique("sum")
    peer = spawn_python("sum-array", name)
    to_peer = _lookup(names, name)
    rx, _keep = ferry.port()
    region = ferry.Region(n * 8)
    a = ferry.ndarray(region, "f8", n)
    a[:] = np.arange(n, dtype="f8")
    copied = ferry.counters()["bytes_copied"]
    to_peer.send(ferry.Message(1, n.to_bytes(8, "little")).add(region).set_reply(rx.make_send_once()))
    assert ferry.counters()["bytes_copied"] == copied, "sending the array copied bytes"
    a[:] = 0.0  # after sealing: stays in this process
    reply = rx.recv(LIMIT)
    assert float(reply.body) == n * (n - 1) / 2
    assert "mode=copy writeable=False" in finish(peer)


def test_received_array_is_read_only_and_outlives_its_message(names):
    n = 100_000
    name = unique("recv")
    rx, tx = ferry.port()
    names.register(name, tx)
    peer = spawn_python("send-array", name, str(n))
    m = rx.recv(LIMIT)
    assert int.from_bytes(m.body, "little") == n
    item, back = m.items
    assert item.mode == "copy" and item.nbytes == n * 8
    mapped = item.map()
    arr = ferry.ndarray(mapped, "f8", n)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1.0
    with pytest.raises(ValueError):
        arr.flags.writeable = True
    mapped.close()  # the array still holds the mapping
    with pytest.raises(ValueError):
        memoryview(mapped)
    back.send(ferry.Message(3))
    assert "ack=3" in finish(peer)
    # The sender overwrote its copy and exited; ours is unchanged and stays
    # mapped after the message, the item and the mapping object are gone.
    del m, item, mapped
    gc.collect()
    assert arr[-1] == n - 1
    assert float(arr.sum()) == n * (n - 1) / 2
    names.unregister(name)


def test_sender_writes_after_sending_never_reach_the_receiver():
    rx, tx = ferry.port()
    region = ferry.Region(1 << 16)
    a = ferry.ndarray(region, "u4")
    a[:] = 7
    tx.send(ferry.Message(1).add(region))
    assert region.sealed
    a[:] = 9  # copy-on-write, in this process only
    got = ferry.ndarray(rx.recv(LIMIT).items[0].map(), "u4")
    assert (got == 7).all() and (a == 9).all()


def test_resending_a_region_written_through_an_array_sends_the_new_contents():
    rx, tx = ferry.port()
    region = ferry.Region(1 << 16)
    a = ferry.ndarray(region, "u1")
    a[:] = 1
    tx.send(ferry.Message(1).add(region))
    a[:] = 2
    tx.send(ferry.Message(2).add(region))
    del a
    b = np.ndarray((1 << 16,), "u1", buffer=region)  # NumPy holds no view
    b[:] = 3
    tx.send(ferry.Message(3).add(region))
    first, second, third = (ferry.ndarray(rx.recv(LIMIT).items[0].map()) for _ in range(3))
    assert (first == 1).all() and (second == 2).all() and (third == 3).all()


def test_move_refuses_while_an_array_uses_the_region_and_close_keeps_arrays_valid():
    region = ferry.Region(4096)
    a = ferry.ndarray(region, "u1")
    a[:] = 3
    with pytest.raises(BufferError):
        ferry.Message(1).add(region, move=True)
    del a
    with ferry.Region(4096) as other:
        b = numpy_view = np.ndarray((4096,), "u1", buffer=other)  # holds no view
        b[:] = 4
    assert other.closed and int(numpy_view.sum()) == 4 * 4096
    with pytest.raises(ValueError):
        ferry.Message(1).add(other)
    rx, tx = ferry.port()
    tx.send(ferry.Message(1).add(region, move=True))
    assert region.closed
    assert rx.recv(LIMIT).items[0].mode == "move"


def test_a_move_after_a_copy_sends_what_arrays_wrote_since():
    """A region sent by copy, then written through an array, then sent by
    move sends what the array wrote (writes through arrays are invisible to
    ferry, as for a second send by copy)."""
    rx, tx = ferry.port()
    region = ferry.Region(4096)
    a = ferry.ndarray(region, "u1")
    a[:] = 1
    tx.send(ferry.Message(1).add(region))
    a[:] = 2
    del a
    tx.send(ferry.Message(2).add(region, move=True))
    first = rx.recv(LIMIT).items[0].copy_out()
    second = rx.recv(LIMIT).items[0].copy_out()
    assert (set(first), set(second)) == ({1}, {2})


def test_an_array_holding_no_view_outlives_a_move_of_its_region():
    """``numpy.ndarray(buffer=region)`` releases its buffer view at once, so
    a move cannot count it: the move leaves this process's view of a region
    ever viewed mapped (copy-on-write) for as long as the region object
    lives, and the array still reads and writes it, without the receiver
    seeing a write. In a child process: the failure is a crash."""
    child = subprocess.run([sys.executable, "-c", _MOVED_UNDER_AN_ARRAY], capture_output=True, text=True, timeout=LIMIT)
    assert child.returncode == 0, f"the child ended with {child.returncode}: {child.stderr}"
    n = 1 << 17
    assert child.stdout.split() == ["move", str(7 * (n - 1) + 5), "7", str(7 * n)]


_MOVED_UNDER_AN_ARRAY = """
import numpy as np, ferry
rx, tx = ferry.port()
region = ferry.Region(1 << 20)
a = np.ndarray((1 << 17,), "u8", buffer=region)
a[:] = 7
tx.send(ferry.Message(1).add(region, move=True))
assert region.closed
a[0] = 5
item = rx.recv(30).items[0]
mode = item.mode
got = ferry.ndarray(item.map(), "u8")
print(mode, int(a.sum()), int(got[0]), int(got.sum()))
"""


def test_bytes_and_arrays_sent_with_one_copy():
    rx, tx = ferry.port()
    data = np.arange(1000, dtype="i4")
    tx.send(ferry.Message(1).add_bytes(data))
    data[:] = 0
    item = rx.recv(LIMIT).items[0]
    assert item.mode == "move"
    got = np.frombuffer(item.copy_out(), dtype="i4")
    assert (got == np.arange(1000)).all()


def test_writable_mapping_is_private():
    rx, tx = ferry.port()
    region = ferry.Region(4096)
    ferry.ndarray(region)[:] = 5
    tx.send(ferry.Message(1).add(region))
    tx.send(ferry.Message(2).add(region))
    w = ferry.ndarray(rx.recv(LIMIT).items[0].map(writable=True))
    w[:] = 6
    other = ferry.ndarray(rx.recv(LIMIT).items[0].map())
    assert (w == 6).all() and (other == 5).all() and (ferry.ndarray(region) == 5).all()
