#!/usr/bin/env bash
# Installs the Debian packages named as arguments with apt-get, as root or
# through sudo; without either (or without apt-get) it says what to run and
# fails. scripts/ensure-tools.sh and scripts/ensure-arm64-vm.sh call it with
# what they found missing.
set -euo pipefail
[ $# -gt 0 ] || exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
  echo "missing Debian packages: $*; install them as root: apt-get install -y $*" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages: $*; this script installs them with apt-get, which this machine lacks: install them with your package manager" >&2
  exit 1
fi
echo "installing $* ..." >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
