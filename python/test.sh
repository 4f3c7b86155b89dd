#!/usr/bin/env bash
# Builds ferry's Python package into a virtual environment and runs its
# pytest suite (real processes: Python peers and the Rust ferry-peer).
# Works from a clean clone: creates target/python-venv (installing Debian's
# python3-venv first when running as root without it), installs maturin,
# numpy, pytest and mypy (which checks the type stubs) from PyPI, builds
# the extension (debug), the Rust peer and the C library, then runs pytest. Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${FERRY_PY_VENV:-$TARGET/python-venv}
PYTHON=${PYTHON:-python3}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "python/test.sh: $PYTHON not found; install Python 3.11 or later" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "python/test.sh: ferry's Python package needs Python 3.11 or later ($("$PYTHON" --version))" >&2
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      ver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      echo "python/test.sh: installing python3-venv with apt-get"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${ver}-venv" || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    else
      echo "python/test.sh: '$PYTHON -m venv' is unavailable; install your system's python3-venv package" >&2
      exit 1
    fi
  fi
  "$PYTHON" -m venv "$VENV"
fi

export VIRTUAL_ENV=$VENV
export PATH="$VENV/bin:$PATH"
python -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" numpy pytest mypy

# The Rust peer and libferry.so (the cross-language tests compile C
# programs against it).
cargo build --quiet -p ferry-tests --bin ferry-peer
cargo build --quiet -p ferry-ffi
maturin develop --quiet --manifest-path python/Cargo.toml
cd python
exec python -m pytest -q "$@"
