"""ferry's Python benchmarks, in the benchmark schema (docs/benchmarks.md).

Suite ``python``, two cases, each against its baselines in the same run,
interleaved round by round so that ratios survive a noisy machine:

* ``oneshot``: a NumPy array of ``--mib`` MiB (256 by default) produced in one
  process before timing starts, sent to another, which sums it (touch
  ``read``) and acknowledges with the sum. Impls: ``ferry-py`` (filled in a
  ferry region, sent by value without copying, mapped lazily by the
  receiver: on this kind of machine the fault-around of lazy mapping beats
  ``MAP_POPULATE`` for data read once), ``mp-pipe-pickle`` (``multiprocessing.Pipe``, pickled),
  ``mp-shared-memory`` (``multiprocessing.shared_memory``: copied in by the
  sender, out by the receiver; the segment is made and faulted in once,
  before timing), ``pickle5-oob`` (pickle protocol 5 with out-of-band buffers
  over a Pipe).
* ``roundtrip``: 64 bytes there and back. Impls: ``ferry-py`` (an RPC
  connection's ``call``), ``ferry-py-port`` (a message and a reply through
  ports) and ``mp-pipe`` (``send_bytes``/``recv_bytes`` on a
  ``multiprocessing.Pipe``).

Every acknowledgement carries the receiver's sum, checked by the sender, so a
transfer that lost data fails the run.

Usage: ``python bench.py [--quick] [--json FILE] [--mib N]``. With
``--json FILE`` it writes the records and a ``FILE.meta.json`` sidecar
describing the machine.
"""

from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing as mp
import os
import pickle
import platform
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing import shared_memory

import numpy as np

LIMIT = 120.0
STOP = 99


def _bootstrap_env() -> str | None:
    """A private name server for this run, unless FERRY_BOOTSTRAP names one:
    its directory (the parent runs it, see main); the children find it
    through FERRY_BOOTSTRAP and never start one of their own."""
    os.environ["FERRY_NO_AUTOSTART"] = "1"
    if "FERRY_BOOTSTRAP" in os.environ:
        return None
    d = tempfile.mkdtemp(prefix="ferry-pybench-")
    os.environ["FERRY_BOOTSTRAP"] = os.path.join(d, "bootstrap")
    return d


# Receivers (child processes) ---------------------------------------------


def ferry_oneshot_receiver(name: str) -> None:
    import ferry

    os.environ["FERRY_NO_EMBED"] = "1"
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    while True:
        m = rx.recv(LIMIT)
        if m.op == STOP:
            return
        (item,) = m.items
        mapped = item.map()
        arr = ferry.ndarray(mapped, "u8")
        total = int(arr.sum(dtype=np.uint64))
        m.reply(ferry.Message(2, total.to_bytes(8, "little")), LIMIT)
        del arr, mapped, item, m


def pipe_pickle_receiver(conn) -> None:
    while True:
        arr = conn.recv()
        if arr is None:
            return
        conn.send(int(arr.sum(dtype=np.uint64)))
        del arr


def shm_receiver(conn, shm_name: str, count: int) -> None:
    shm = shared_memory.SharedMemory(name=shm_name)
    shared = np.ndarray((count,), "u8", buffer=shm.buf)
    while conn.recv_bytes() == b"go":
        mine = np.array(shared)  # copy out
        conn.send(int(mine.sum(dtype=np.uint64)))
        del mine
    del shared
    shm.close()


def pickle5_receiver(conn) -> None:
    while True:
        head = conn.recv()
        if head is None:
            return
        data, n = head
        bufs = [conn.recv_bytes() for _ in range(n)]
        arr = pickle.loads(data, buffers=bufs)
        conn.send(int(arr.sum(dtype=np.uint64)))
        del arr, bufs


def ferry_rpc_server(name: str) -> None:
    import ferry

    os.environ["FERRY_NO_EMBED"] = "1"
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    server = ferry.RpcServer(rx)
    reply = None
    while True:
        try:
            conn, req = server.reply_and_wait(reply, LIMIT)
        except ferry.NoClients:
            return
        if req.op == STOP:
            server.reply(conn, ferry.Message(STOP))
            return
        reply = (conn, ferry.Message(req.op, req.body))


def ferry_port_echo(name: str) -> None:
    import ferry

    os.environ["FERRY_NO_EMBED"] = "1"
    rx, tx = ferry.port()
    with ferry.Bootstrap() as bs:
        bs.register(name, tx)
    tx.close()
    back = None
    while True:
        m = rx.recv(LIMIT)
        if back is None:
            (back,) = m.items
        if m.op == STOP:
            return
        back.send(ferry.Message(m.op, m.body))


def pipe_echo(conn) -> None:
    while True:
        b = conn.recv_bytes()
        if b == b"stop":
            return
        conn.send_bytes(b)


# Senders (this process) ----------------------------------------------------


def lookup(name: str):
    import ferry

    with ferry.Bootstrap() as bs:
        for _ in range(10_000):
            try:
                return bs.lookup(name)
            except ferry.NameNotFound:
                time.sleep(0.002)
    raise RuntimeError(f"{name} never registered")


class Oneshot:
    """The four impls of the oneshot case; each ``run(i)`` times one
    transfer of an array filled with ``i``."""

    def __init__(self, ctx, nbytes: int):
        import ferry

        self.ferry = ferry
        self.count = nbytes // 8
        self.nbytes = self.count * 8
        self.procs = []
        name = f"pybench-oneshot-{os.getpid()}"
        p = ctx.Process(target=ferry_oneshot_receiver, args=(name,), daemon=True)
        p.start()
        self.procs.append(p)
        self.to_ferry = lookup(name)
        self.ack, self._ack_tx = ferry.port()

        self.pipe, child = ctx.Pipe()
        self._start(ctx, pipe_pickle_receiver, child)
        self.shm = shared_memory.SharedMemory(create=True, size=self.nbytes)
        self.shm_arr = np.ndarray((self.count,), "u8", buffer=self.shm.buf)
        self.shm_arr[:] = 0  # fault the segment in once, before timing
        self.shm_pipe, child = ctx.Pipe()
        self._start(ctx, shm_receiver, child, self.shm.name, self.count)
        self.p5_pipe, child = ctx.Pipe()
        self._start(ctx, pickle5_receiver, child)

    def _start(self, ctx, target, *args):
        p = ctx.Process(target=target, args=args, daemon=True)
        p.start()
        self.procs.append(p)

    def _check(self, got: int, fill: int, impl: str) -> None:
        want = fill * self.count
        if got != want:
            raise RuntimeError(f"{impl}: receiver summed {got}, expected {want}")

    def ferry_py(self, fill: int) -> int:
        ferry = self.ferry
        region = ferry.Region(self.nbytes)
        arr = ferry.ndarray(region, "u8")
        arr.fill(fill)  # produced before timing
        msg = ferry.Message(1)
        t0 = time.perf_counter_ns()
        self.to_ferry.send(msg.add(region).set_reply(self.ack.make_send_once()), LIMIT)
        got = int.from_bytes(self.ack.recv(LIMIT).body, "little")
        t1 = time.perf_counter_ns()
        self._check(got, fill, "ferry-py")
        return t1 - t0

    def mp_pipe_pickle(self, fill: int) -> int:
        arr = np.full(self.count, fill, "u8")
        t0 = time.perf_counter_ns()
        self.pipe.send(arr)
        got = self.pipe.recv()
        t1 = time.perf_counter_ns()
        self._check(got, fill, "mp-pipe-pickle")
        return t1 - t0

    def mp_shared_memory(self, fill: int) -> int:
        arr = np.full(self.count, fill, "u8")
        t0 = time.perf_counter_ns()
        self.shm_arr[:] = arr  # copy in
        self.shm_pipe.send_bytes(b"go")
        got = self.shm_pipe.recv()
        t1 = time.perf_counter_ns()
        self._check(got, fill, "mp-shared-memory")
        return t1 - t0

    def pickle5_oob(self, fill: int) -> int:
        arr = np.full(self.count, fill, "u8")
        t0 = time.perf_counter_ns()
        bufs = []
        data = pickle.dumps(arr, protocol=5, buffer_callback=bufs.append)
        self.p5_pipe.send((data, len(bufs)))
        for b in bufs:
            self.p5_pipe.send_bytes(b.raw())
        got = self.p5_pipe.recv()
        t1 = time.perf_counter_ns()
        self._check(got, fill, "pickle5-oob")
        return t1 - t0

    def close(self) -> None:
        self.to_ferry.send(self.ferry.Message(STOP), LIMIT)
        self.pipe.send(None)
        self.shm_pipe.send_bytes(b"stop")
        self.p5_pipe.send(None)
        for p in self.procs:
            p.join(LIMIT)
        del self.shm_arr
        self.shm.close()
        self.shm.unlink()


class Roundtrip:
    """The roundtrip impls; each ``run(n)`` returns ``n`` per-call times."""

    def __init__(self, ctx, nbytes: int):
        import ferry

        self.ferry = ferry
        self.body = bytes(range(nbytes % 256)) if nbytes < 256 else bytes(nbytes)
        self.procs = []
        rpc_name = f"pybench-rpc-{os.getpid()}"
        port_name = f"pybench-port-{os.getpid()}"
        for target, name in ((ferry_rpc_server, rpc_name), (ferry_port_echo, port_name)):
            p = ctx.Process(target=target, args=(name,), daemon=True)
            p.start()
            self.procs.append(p)
        self.conn = ferry.Connection(lookup(rpc_name), timeout=LIMIT)
        self.to_echo = lookup(port_name)
        self.back, back_tx = ferry.port()
        self.to_echo.send(ferry.Message(0).add(back_tx), LIMIT)
        self.pipe, child = ctx.Pipe()
        p = ctx.Process(target=pipe_echo, args=(child,), daemon=True)
        p.start()
        self.procs.append(p)

    def ferry_py(self, n: int) -> list[int]:
        Message, call, body = self.ferry.Message, self.conn.call, self.body
        out = []
        for i in range(n):
            t0 = time.perf_counter_ns()
            r = call(Message(1, body), LIMIT)
            out.append(time.perf_counter_ns() - t0)
        if r.body != body:
            raise RuntimeError("ferry-py: reply differs from the request")
        return out

    def ferry_py_port(self, n: int) -> list[int]:
        Message, send, recv, body = self.ferry.Message, self.to_echo.send, self.back.recv, self.body
        out = []
        for i in range(n):
            t0 = time.perf_counter_ns()
            send(Message(1, body), LIMIT)
            r = recv(LIMIT)
            out.append(time.perf_counter_ns() - t0)
        if r.body != body:
            raise RuntimeError("ferry-py-port: reply differs from the request")
        return out

    def mp_pipe(self, n: int) -> list[int]:
        send, recv, body = self.pipe.send_bytes, self.pipe.recv_bytes, self.body
        out = []
        for i in range(n):
            t0 = time.perf_counter_ns()
            send(body)
            r = recv()
            out.append(time.perf_counter_ns() - t0)
        if r != body:
            raise RuntimeError("mp-pipe: reply differs from the request")
        return out

    def close(self) -> None:
        try:
            self.conn.call(self.ferry.Message(STOP), LIMIT)
        except self.ferry.RpcError:
            pass
        self.conn.close()
        self.to_echo.send(self.ferry.Message(STOP), LIMIT)
        self.pipe.send_bytes(b"stop")
        for p in self.procs:
            p.join(LIMIT)


# Records -------------------------------------------------------------------


def record(case: str, impl: str, nbytes: int, touch: str, times: list[int], extra: dict | None = None) -> dict:
    s = sorted(times)
    median = float(statistics.median(s))
    p99 = float(s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))])
    return {
        "suite": "python",
        "case": case,
        "impl": impl,
        "bytes": nbytes,
        "placement": "unpinned",
        "touch": touch,
        "iters": len(s),
        "median_ns": median,
        "p99_ns": p99,
        "min_ns": float(s[0]),
        "gbps": (nbytes / median) if case == "oneshot" and median > 0 else None,
        "extra": extra or {},
    }


def machine() -> dict:
    def read(path: str) -> str | None:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return None

    cpu = None
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    try:
        from importlib.metadata import version

        ferry_version = version("ferry")
    except Exception:  # noqa: BLE001 - the version is informative only
        ferry_version = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "thp_enabled": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_shmem_enabled": read("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        "userfaultfd_unprivileged": read("/proc/sys/vm/unprivileged_userfaultfd"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "ferry": ferry_version,
    }


def table(records: list[dict]) -> str:
    lines = [f"{'case':<10} {'impl':<18} {'bytes':>10} {'iters':>6} {'median':>12} {'p99':>12} {'min':>12} {'GB/s':>7} {'vs ferry-py':>11}"]
    base = {r["case"]: r["median_ns"] for r in records if r["impl"] == "ferry-py"}
    for r in records:
        ratio = r["median_ns"] / base[r["case"]] if r["case"] in base else float("nan")
        gbps = f"{r['gbps']:.2f}" if r["gbps"] else "-"
        lines.append(
            f"{r['case']:<10} {r['impl']:<18} {r['bytes']:>10} {r['iters']:>6} {fmt(r['median_ns']):>12} {fmt(r['p99_ns']):>12} {fmt(r['min_ns']):>12} {gbps:>7} {ratio:>10.1f}x"
        )
    return "\n".join(lines)


def fmt(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few iterations of each case (seconds), for smoke checks")
    ap.add_argument("--json", metavar="FILE", help="write the records here, and the machine to FILE.meta.json")
    ap.add_argument("--mib", type=int, default=256, help="oneshot payload in MiB (default 256)")
    ap.add_argument("--case", choices=["oneshot", "roundtrip", "all"], default="all")
    args = ap.parse_args(argv)
    private = _bootstrap_env()
    if private is not None:
        # The private name server's directory goes with the run.
        atexit.register(shutil.rmtree, private, True)
    import ferry

    # This run's name server, on a thread of this process for the whole run.
    server = ferry.Bootstrap.private(private) if private is not None else None
    ctx = mp.get_context("spawn")
    records: list[dict] = []

    if args.case in ("oneshot", "all"):
        rounds = 2 if args.quick else 7
        nbytes = args.mib << 20
        one = Oneshot(ctx, nbytes)
        impls = {"ferry-py": one.ferry_py, "mp-pipe-pickle": one.mp_pipe_pickle, "mp-shared-memory": one.mp_shared_memory, "pickle5-oob": one.pickle5_oob}
        times: dict[str, list[int]] = {k: [] for k in impls}
        before = ferry.counters()
        try:
            for i in range(rounds):
                for impl, run in impls.items():
                    times[impl].append(run(i + 1))
        finally:
            one.close()
        copied = ferry.counters()["bytes_copied"] - before["bytes_copied"]
        for impl, t in times.items():
            extra = {"receiver_map": "lazy", "sender_bytes_copied": copied} if impl == "ferry-py" else {}
            records.append(record("oneshot", impl, one.nbytes, "read", t, extra))

    if args.case in ("roundtrip", "all"):
        n = 500 if args.quick else 5000
        rounds = 2 if args.quick else 5
        rt = Roundtrip(ctx, 64)
        impls = {"ferry-py": rt.ferry_py, "ferry-py-port": rt.ferry_py_port, "mp-pipe": rt.mp_pipe}
        times = {k: [] for k in impls}
        try:
            for run in impls.values():
                run(n // 10)  # warm up
            for _ in range(rounds):
                for impl, run in impls.items():
                    times[impl].extend(run(n))
        finally:
            rt.close()
        for impl, t in times.items():
            extra = {"path": "rpc-call"} if impl == "ferry-py" else ({"path": "port-send-recv"} if impl == "ferry-py-port" else {})
            records.append(record("roundtrip", impl, 64, "none", t, extra))

    print(table(records))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
        with open(args.json + ".meta.json", "w") as f:
            json.dump(machine(), f, indent=2)
    if server is not None:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
