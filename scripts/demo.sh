#!/usr/bin/env bash
# `make demo`: the conversion example end to end on this machine (local
# sandbox backend + a local S3 server). Needs bubblewrap, Go and versitygw
# (`make tools`). The result stays in ./demo-out.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo runs its own copy of examples/conversion/bundle.yaml on the local
# backend, naming no other (examples/demo), so the default build serves it.
BIN=${BIN:-bin/airflow-go-worker}
if [ ! -x "$BIN" ]; then
  CGO_ENABLED=0 go build -o "$BIN" ./cmd/airflow-go-worker
fi
exec go run ./examples/demo -bin "$BIN" -dir "${DEMO_DIR:-demo-out}"
