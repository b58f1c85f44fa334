#!/usr/bin/env bash
# `make demo`: the conversion example end to end on this machine (local
# sandbox backend + a local S3 server). Needs bubblewrap, Go and versitygw
# (`make tools`). The result stays in ./demo-out.
set -euo pipefail
cd "$(dirname "$0")/.."
# examples/conversion/bundle.yaml names the Modal backend (the demo runs it
# on local), so the binary must link it: unless BIN names one, build one
# with that extra (make build EXTRAS=modal) beside the default build.
if [ -z "${BIN:-}" ]; then
  BIN=bin/demo/airflow-go-worker
  go build -tags backend_modal -o "$BIN" ./cmd/airflow-go-worker
fi
exec go run ./examples/demo -bin "$BIN" -dir "${DEMO_DIR:-demo-out}"
