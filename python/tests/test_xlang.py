"""A Python program and a Rust program exchange rights and by-value regions
(the Rust side is ``ferry-peer xlang``; its protocol is in
``tests/src/bin/peer/xlang.rs``)."""

from __future__ import annotations

import numpy as np

import ferry
from conftest import LIMIT, finish, spawn_rust, unique


def test_python_and_rust_exchange_rights_and_by_value_regions(names):
    name = unique("xlang")
    rx, tx = ferry.port()
    names.register(name, tx)
    nbytes = 3 << 20
    peer = spawn_rust("xlang", name, str(nbytes))

    # Rust -> Python: a send right and a region by value.
    m = rx.recv(LIMIT)
    assert m.op == 1 and int.from_bytes(m.body, "little") == nbytes
    to_rust, item = m.items
    assert isinstance(to_rust, ferry.SendRight) and item.mode == "copy"
    got = ferry.ndarray(item.map(), "u1")
    assert not got.flags.writeable
    assert (got == (np.arange(nbytes) % 251).astype("u1")).all()

    # Python -> Rust: a region by value and a send-once reply right.
    count = 1 << 18
    region = ferry.Region(count * 8)
    words = ferry.ndarray(region, "<u8", count)
    words[:] = np.arange(count, dtype="<u8") * 3
    reply_port, _keep = ferry.port()
    to_rust.send(ferry.Message(2, count.to_bytes(8, "little")).add(region).set_reply(reply_port.make_send_once()), LIMIT)
    words[:] = 0  # the Rust side must not see this

    answer = reply_port.recv(LIMIT)
    expected = 3 * count * (count - 1) // 2
    assert answer.op == 3 and answer.via_send_once
    assert int.from_bytes(answer.body, "little") == expected
    assert f"xlang-ok sum={expected} mode=Copy" in finish(peer)
    names.unregister(name)
