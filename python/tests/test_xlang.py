"""A Python program and a Rust program exchange rights and by-value regions
(the Rust side is ``ferry-peer xlang``; its protocol is in
``tests/src/bin/peer/xlang.rs``); and a Python, a C and a Rust program do so
all three (``ferry-peer xlang3`` and ``crates/ferry-ffi/tests/c/xlang3.c``)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import ferry
from conftest import LIMIT, build_c, finish, spawn_program, spawn_rust, unique


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


PY_SALT, C_SALT, RUST_SALT = 0x1111111111111111, 0x2222222222222222, 0x3333333333333333


def words(count: int, salt: int) -> np.ndarray:
    """Word ``i`` is ``i * 0x9E3779B97F4A7C15 ^ salt`` (wrapping), as in C and Rust."""
    return (np.arange(count, dtype="<u8") * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(salt)


def salted(nbytes: int, salt: int) -> ferry.Region:
    region = ferry.Region(nbytes)
    ferry.ndarray(region, "<u8", nbytes // 8)[:] = words(nbytes // 8, salt)
    return region


def check(item: object, nbytes: int, salt: int) -> None:
    assert isinstance(item, ferry.RegionItem) and item.mode == "copy", item
    got = ferry.ndarray(item.map(), "<u8")
    assert got.shape == (nbytes // 8,) and not got.flags.writeable
    assert (got == words(nbytes // 8, salt)).all()


def test_c_python_and_rust_exchange_rights_and_by_value_regions(tmp_path):
    """Python and C each send Rust a send right to their own port and a
    region by value; Rust checks both regions and passes each one the
    other's send right with a region of its own; then Python and C send
    each other a region through the right that came through Rust. Every
    region is checked word by word by each program that receives it."""
    nbytes = 1 << 20
    name = unique("xlang3")
    exe = build_c("ferry_xlang3", Path("tests/c/xlang3.c"), tmp_path)
    rust = spawn_rust("xlang3", name, str(nbytes))
    c = spawn_program(exe, name, str(nbytes))
    to_rust = None
    with ferry.Bootstrap() as bs:
        for _ in range(int(LIMIT / 0.005)):
            try:
                to_rust = bs.lookup(name)
                break
            except ferry.NameNotFound:
                time.sleep(0.005)
    assert to_rust is not None, f"{name} was never registered"

    rx, tx = ferry.port()
    to_rust.send(ferry.Message(1, b"p").add(tx).add(salted(nbytes, PY_SALT)), LIMIT)
    seen: set[int] = set()
    while seen != {2, 4}:
        m = rx.recv(LIMIT)
        assert m.op not in seen, f"op {m.op} twice"
        seen.add(m.op)
        if m.op == 2:
            # From Rust: C's send right and Rust's region.
            assert m.body == b"r"
            to_c, item = m.items
            assert isinstance(to_c, ferry.SendRight)
            check(item, nbytes, RUST_SALT)
            to_c.send(ferry.Message(4, b"p").add(salted(nbytes, PY_SALT)), LIMIT)
        else:
            # From C, through the right Rust passed it: C's region.
            assert m.op == 4 and m.body == b"c", (m.op, m.body)
            (item,) = m.items
            check(item, nbytes, C_SALT)
    assert "xlang3-ok" in finish(rust)
    assert "xlang3: ok" in finish(c)
