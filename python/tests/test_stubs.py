"""The type stubs describe the compiled module as it is, and the pure-Python
package type-checks strictly against them."""

from __future__ import annotations

import subprocess
import sys

from conftest import HERE, LIMIT

PACKAGE = HERE.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=LIMIT * 4)


def test_stubs_match_the_compiled_module():
    out = run("mypy.stubtest", "ferry._ferry")
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_type_checks_strictly():
    out = run("mypy", "--strict", "ferry")
    assert out.returncode == 0, out.stdout + out.stderr
