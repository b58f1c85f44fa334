#!/usr/bin/env bash
# Creates .venv (or $VENV) with the exact Python pins in python/requirements.lock:
# the real Airflow task SDK, Modal's Python client and the common.ai provider.
# It reinstalls only when the lock changed since the last install, so a warm
# `make test` pays nothing. Prints the venv's python path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-$PWD/.venv}"
lock="python/requirements.lock"
stamp="$venv/.lock.sha256"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
  echo "ensure-venv: need Python >= 3.10 for apache-airflow 3.3 (set PYTHON=/path/to/python3)" >&2; exit 1
fi
if ! "$py" -m venv --help >/dev/null 2>&1; then
  echo "ensure-venv: $py has no venv module; on Debian: apt-get install -y python3-venv" >&2; exit 1
fi
echo "ensure-venv: creating $venv from $lock (first run downloads ~150 packages from PyPI, 1-3 min) ..." >&2
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$lock" >&2 || {
  echo "ensure-venv: installing $lock failed (see pip's message above); is PyPI reachable?" >&2; exit 1; }
"$venv/bin/python" -m pip check >&2 || { echo "ensure-venv: the pinned set is inconsistent (pip check above)" >&2; exit 1; }
echo "$want" > "$stamp"
echo "$venv/bin/python"
