"""Every example in python/examples runs as it is."""

from __future__ import annotations

import subprocess
import sys

from conftest import HERE, LIMIT


def test_numpy_by_value_example_runs():
    script = HERE.parent / "examples" / "numpy_by_value.py"
    out = subprocess.run([sys.executable, str(script), "8"], capture_output=True, text=True, timeout=LIMIT * 2)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "copied 0 bytes" in out.stdout
    assert "writing is refused" in out.stdout and "writeable=False" in out.stdout
