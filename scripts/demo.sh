#!/usr/bin/env bash
# `make demo`: the conversion example end to end on this machine (local
# sandbox backend + a local S3 server). Needs bubblewrap, Go and versitygw
# (`make tools`). The result stays in ./demo-out.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo runs its own copy of examples/conversion/bundle.yaml on the local
# backend, naming no other (examples/demo), and moves its files through S3:
# its binary is the default build plus the s3 extra (make build EXTRAS=s3).
BIN=${BIN:-bin/airflow-go-worker-demo}
if [ ! -x "$BIN" ]; then
  CGO_ENABLED=0 go build -tags store_s3 -o "$BIN" ./cmd/airflow-go-worker
fi
exec go run ./examples/demo -bin "$BIN" -dir "${DEMO_DIR:-demo-out}"
