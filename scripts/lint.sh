#!/usr/bin/env bash
# make vet's linters: golangci-lint, whose staticcheck, errcheck, unused,
# ineffassign and govet run as .golangci.yml says (staticcheck's checks are
# listed there, once), at the version pinned here, installed from the Go
# module proxy into bin/tools the first time (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
GOLANGCI_LINT_VERSION=v2.15.0
tools="$PWD/bin/tools"
mkdir -p "$tools"
stamp="$tools/.golangci-lint-$GOLANGCI_LINT_VERSION"
if [ ! -x "$tools/golangci-lint" ] || [ ! -e "$stamp" ]; then
  echo "lint: installing golangci-lint $GOLANGCI_LINT_VERSION (once)"
  GOBIN="$tools" GOFLAGS=-mod=mod go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
  rm -f "$tools/.golangci-lint-"*; touch "$stamp"
fi
# Another checkout on the machine may lint at the same time: wait for its
# run to end (golangci-lint's lock) rather than fail ("parallel
# golangci-lint is running", exit 3), and rather than run both at once on a
# busy machine.
"$tools/golangci-lint" run --allow-serial-runners ./...
