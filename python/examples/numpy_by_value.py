"""A NumPy array sent by value to another process without copying a byte.

    python python/examples/numpy_by_value.py [MiB]

This process fills an array inside a ferry region, sends it, and goes on
writing its own copy; the other process (this script again, started with
``--receiver``) maps it read-only, sums it and replies with the sum.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import ferry

NAME = f"numpy-by-value-{os.getpid()}"


def receiver(name: str) -> None:
    rx, tx = ferry.port()
    with ferry.Bootstrap() as names:
        names.register(name, tx)
    print("receiver: ready", flush=True)
    m = rx.recv(timeout=60)
    (item,) = m.items
    mode = item.mode                                  # "copy": by value, sealed
    arr = ferry.ndarray(item.map(), "f8")             # read-only, over the sealed pages
    try:
        arr[0] = 0.0
    except ValueError as e:
        print(f"receiver: writing is refused ({e})")
    m.reply(ferry.Message(2, repr(float(arr.sum())).encode()))
    print(f"receiver: summed {arr.size} float64s by {mode}, writeable={arr.flags.writeable}")


def sender(mib: int) -> None:
    # A private name server on a thread of this process; the receiver is
    # told where it listens.
    scratch = tempfile.mkdtemp(prefix="ferry-numpy-")
    names = ferry.Bootstrap.private(scratch)
    env = dict(os.environ, FERRY_BOOTSTRAP=str(names.path), FERRY_NO_AUTOSTART="1")
    child = subprocess.Popen([sys.executable, __file__, "--receiver", NAME], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        print(child.stdout.readline(), end="")       # "receiver: ready" once registered
        to_receiver = names.lookup(NAME)
        n = (mib << 20) // 8
        region = ferry.Region(n * 8)
        a = ferry.ndarray(region, "f8", n)           # writable, over the region
        a[:] = 1.0
        before = ferry.counters()["bytes_copied"]
        replies, _ = ferry.port()
        to_receiver.send(ferry.Message(1).add(region).set_reply(replies.make_send_once()))
        copied = ferry.counters()["bytes_copied"] - before
        a[:] = 2.0                                   # copy-on-write: stays in this process
        total = float(replies.recv(timeout=60).body)
        print(f"sender: sent {mib} MiB, copied {copied} bytes; the receiver's sum is {total:.0f} (expected {n})")
        assert total == n, "the receiver saw writes made after sending"
    finally:
        out, _ = child.communicate(timeout=60)
        print(out, end="")
        shutil.rmtree(scratch, ignore_errors=True)
    if child.returncode != 0:
        raise SystemExit(f"receiver failed with {child.returncode}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--receiver"]:
        receiver(sys.argv[2])
    else:
        sender(int(sys.argv[1]) if len(sys.argv) > 1 else 64)
