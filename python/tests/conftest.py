"""Shared set-up for ferry's Python tests.

Every test run gets a private name server: the test process starts one on a
thread of its own in a fresh temporary directory (``ferry.Bootstrap.private``),
``FERRY_BOOTSTRAP`` points there, and the peer processes it spawns
(``FERRY_NO_AUTOSTART=1``) talk to that one only. A watchdog dumps the stacks
and ends the run if a test hangs; nothing here measures time.
"""

from __future__ import annotations

import atexit
import faulthandler
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_DIR = tempfile.mkdtemp(prefix="ferry-pytest-")
# Removed when the test process exits, passed or failed.
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)
os.environ["FERRY_BOOTSTRAP"] = os.path.join(_DIR, "bootstrap")
os.environ["FERRY_NO_AUTOSTART"] = "1"

import ferry  # noqa: E402

#: The session's name server, alive as long as the test process.
_SERVER = ferry.Bootstrap.private(_DIR)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: Generous bound for any single wait in a test; a hang fails, it is not timed.
LIMIT = 30.0
WATCHDOG = 120.0
_names = itertools.count()


@pytest.fixture(autouse=True)
def watchdog():
    """Turns a deadlocked test into a failure with every thread's stack."""
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def names() -> ferry.Bootstrap:
    with ferry.Bootstrap() as bs:
        yield bs


def unique(prefix: str) -> str:
    """A name no other test registers."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def _peer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["FERRY_NO_EMBED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def spawn_python(role: str, *args: str) -> subprocess.Popen:
    """Starts ``peer.py ROLE ARGS`` in a new Python process."""
    return subprocess.Popen([sys.executable, str(HERE / "peer.py"), role, *args], env=_peer_env(), stdout=subprocess.PIPE, text=True)


def rust_peer() -> Path:
    """The Rust peer program (``cargo build`` makes it)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    exe = target / "debug" / "ferry-peer"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `cargo build -p ferry-tests` first (python/test.sh does)")
    return exe


def spawn_rust(role: str, *args: str) -> subprocess.Popen:
    """Starts ``ferry-peer ROLE ARGS``."""
    return subprocess.Popen([str(rust_peer()), role, *args], env=_peer_env(), stdout=subprocess.PIPE, text=True)


def finish(child: subprocess.Popen) -> str:
    """Waits for a peer and returns its output; fails the test if it failed."""
    try:
        out, _ = child.communicate(timeout=LIMIT * 2)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        pytest.fail(f"peer {child.args} hung; output:\n{out}")
    assert child.returncode == 0, f"peer {child.args} failed with {child.returncode}; output:\n{out}"
    return out


def build_c(name: str, source: Path, out_dir: Path) -> Path:
    """Compiles a C program of ``crates/ferry-ffi`` (``source`` relative to
    that crate) against ``libferry.so`` (``cargo build -p ferry-ffi`` makes
    it; python/test.sh does), with the C compiler ``$CC`` or ``cc``."""
    crate = REPO / "crates" / "ferry-ffi"
    lib = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug"
    if not (lib / "libferry.so").exists():
        pytest.fail(f"{lib / 'libferry.so'} is missing: run `cargo build -p ferry-ffi` first (python/test.sh does)")
    exe = out_dir / name
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread", f"-I{crate / 'include'}", f"-I{crate / 'examples' / 'c'}",
           str(crate / source), "-o", str(exe), f"-L{lib}", "-lferry", f"-Wl,-rpath,{lib}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT * 4)
    except FileNotFoundError:
        pytest.fail(f"no C compiler: {cc} not found (set CC)")
    assert out.returncode == 0, f"compiling {source} failed:\n{out.stderr}"
    return exe


def spawn_program(exe: Path, *args: str) -> subprocess.Popen:
    """Starts a compiled peer program with the peers' environment."""
    return subprocess.Popen([str(exe), *args], env=_peer_env(), stdout=subprocess.PIPE, text=True)
