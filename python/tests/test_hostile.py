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
