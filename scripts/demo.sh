#!/usr/bin/env bash
# `make demo`: the conversion example end to end on this machine (local
# sandbox backend + a local S3 server). Needs bubblewrap, prlimit,
# mkfs.ext4, Go and versitygw (`scripts/ensure-tools.sh demo`, which `make
# demo` runs first). The result stays in ./demo-out.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo runs its own copy of examples/conversion/bundle.yaml on the local
# backend, naming no other (examples/demo), and moves its files through S3:
# its binary is the default build plus the s3 extra, built as `make build
# EXTRAS=s3` builds (CGO_ENABLED=0, -trimpath).
BIN=${BIN:-bin/airflow-go-worker-demo}
DRIVER="$(dirname "$BIN")/airflow-go-worker-demo-driver"

# build WHAT CMD...: runs a go build, saying what it builds and, while it
# runs, how long it has taken: with an empty Go build cache the two builds
# compile the AWS SDK and versitygw's packages, minutes of silence otherwise
# (137-178 s for the binary on the 2-core development machine, 200 s and
# 190 s for the binary and the driver under a load of 6).
build() {
  local what=$1 start=$SECONDS
  shift
  echo "demo: building $what ..."
  "$@" &
  local pid=$! next=15
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - start)) -ge "$next" ]; then
      if [ "$next" -eq 15 ]; then
        echo "demo: still building $what (15 s; with an empty Go build cache this takes minutes, later runs seconds)"
      else
        echo "demo: still building $what ($((SECONDS - start)) s)"
      fi
      next=$((next + 30))
    fi
  done
  wait "$pid"
  echo "demo: built $what in $((SECONDS - start)) s"
}

build "$BIN (the default build plus the s3 extra)" \
  env CGO_ENABLED=0 go build -trimpath -buildvcs=auto -tags store_s3 -o "$BIN" ./cmd/airflow-go-worker
build "the demo driver (examples/demo)" go build -trimpath -o "$DRIVER" ./examples/demo
exec "$DRIVER" -bin "$BIN" -dir "${DEMO_DIR:-demo-out}"
