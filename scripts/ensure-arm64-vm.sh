#!/usr/bin/env bash
# Gets what `make test-arm64` needs to boot an emulated arm64 Linux: QEMU's
# aarch64 system emulator (Debian's qemu-system-arm) and Debian's current
# arm64 kernel, unpacked into a cache directory. The kernel comes from the
# machine's own Debian sources through a private apt state (its own lists,
# cache and an empty status file), so the machine's dpkg architectures and
# package lists are left as they were. Prints the kernel's path on stdout.
set -euo pipefail

# QEMU's aarch64 system emulator.
command -v qemu-system-aarch64 >/dev/null 2>&1 || "$(dirname "$0")/apt-install.sh" qemu-system-arm

cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-go-worker/arm64-vm"
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
: > "$apt_dir/status"
apt=(-q -o APT::Architecture=arm64 -o APT::Architectures::=arm64
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
  -o "Dir::Cache=$apt_dir/cache")
if ! apt-get "${apt[@]}" update >"$apt_dir/update.log" 2>&1; then
  cat "$apt_dir/update.log" >&2
  echo "could not read the arm64 package lists of this machine's Debian sources (above); is the Debian mirror reachable?" >&2
  exit 1
fi
# linux-image-arm64 depends on the current kernel package, linux-image-<abi>-arm64.
pkg="$(apt-cache "${apt[@]}" depends linux-image-arm64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-arm64\)$/\1/p' | head -1)"
if [ -z "$pkg" ]; then
  echo "the arm64 package lists name no kernel behind linux-image-arm64; see $apt_dir/update.log" >&2
  exit 1
fi
kernel="$cache/$pkg/vmlinuz"
if [ ! -s "$kernel" ]; then
  echo "downloading $pkg (arm64, about 60 MB) ..." >&2
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get "${apt[@]}" download "$pkg" >&2 2>"$work/download.log") || {
    cat "$work/download.log" >&2; echo "downloading $pkg failed (above)" >&2; exit 1; }
  dpkg-deb -x "$work"/*.deb "$work/x"
  mkdir -p "$cache/$pkg"
  cp "$work"/x/boot/vmlinuz-* "$kernel.partial"
  mv "$kernel.partial" "$kernel"
fi
echo "$kernel"
