"""A hostile sender against a Python receiver: every malformed message is
refused with a typed exception, closes every descriptor it carried, and the
port keeps serving; what was received by value cannot be changed by the
sender afterwards. The sender is the Rust ``ferry-peer region-hostile``
(``tests/src/bin/peer/regions.rs``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ferry
from conftest import LIMIT, finish, spawn_rust, unique


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_hostile_regions_are_refused_and_nothing_leaks(names):
    name = unique("hostile")
    rx, tx = ferry.port()
    names.register(name, tx)
    before = open_fds()
    peer = spawn_rust("region-hostile", name)
    for op in range(1, 11):
        with pytest.raises(ferry.BadMessage) as e:
            rx.recv(LIMIT)
        assert isinstance(e.value, ferry.RecvError) and isinstance(e.value, ferry.WireError), op
    m = rx.recv(LIMIT)
    assert m.op == 11
    item, back = m.items
    arr = ferry.ndarray(item.map(immediate=True))
    assert (arr == 0x5A).all()
    back.send(ferry.Message(0), LIMIT)
    report = rx.recv(LIMIT)
    assert report.op == 12 and report.body == b"", f"the kernel allowed: {report.body!r}"
    assert (arr == 0x5A).all(), "the hostile sender changed the receiver's bytes"
    honest = rx.recv(LIMIT)
    assert honest.op == 13
    assert np.frombuffer(honest.items[0].copy_out(), "u1").tolist() == [0x13] * 8192
    assert "seal-with-shared-mapping=refused" in finish(peer)
    del m, item, back, report, honest, arr
    names.unregister(name)
    assert open_fds() <= before, "a descriptor of a refused message leaked"


def test_immediate_mapping_refuses_a_sparse_region_past_its_limit():
    # A sparse region costs its sender nothing; mapping it immediately
    # would allocate every page here, so past a limit it is refused before
    # anything is allocated, and the item stays usable.
    rx, tx = ferry.port()
    over = (1 << 30) + 4096
    m = ferry.Message(1)
    m.add(ferry.Region(over))
    tx.send(m)
    item = rx.recv(LIMIT).items[0]
    with pytest.raises(ferry.RegionError, match="exceeds"):
        item.map(immediate=True)
    with pytest.raises(ferry.RegionError, match="exceeds"):
        item.map(immediate=True, limit=1 << 20)
    with pytest.raises(ferry.RegionError, match="exceeds"):
        item.map(limit=1 << 20)
    assert not item.closed and item.nbytes == over
    lazy = item.map()
    assert lazy.nbytes == over
    lazy.close()
    m = ferry.Message(2)
    m.add(ferry.Region(1 << 20))
    tx.send(m)
    item = rx.recv(LIMIT).items[0]
    with pytest.raises(ferry.RegionError, match="exceeds"):
        item.map(immediate=True, limit=(1 << 20) - 1)
    mapped = item.map(immediate=True, limit=1 << 20)
    assert mapped.nbytes == 1 << 20
    mapped.close()
