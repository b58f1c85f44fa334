#!/usr/bin/env bash
# make vet's linters: staticcheck and golangci-lint (.golangci.yml), at the
# versions pinned here, installed from the Go module proxy into bin/tools
# the first time (about a minute each).
set -euo pipefail
cd "$(dirname "$0")/.."
STATICCHECK_VERSION=v0.8.2
GOLANGCI_LINT_VERSION=v2.15.0
tools="$PWD/bin/tools"
mkdir -p "$tools"
# install NAME PKG VERSION: builds PKG@VERSION unless bin/tools has it.
install() {
  local name=$1 pkg=$2 version=$3 stamp="$tools/.$1-$3"
  if [ -x "$tools/$name" ] && [ -e "$stamp" ]; then return; fi
  echo "lint: installing $name $version (once)"
  GOBIN="$tools" GOFLAGS=-mod=mod go install "$pkg@$version"
  rm -f "$tools/.$name-"*; touch "$stamp"
}
install staticcheck honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION"
install golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION"
# staticcheck with golangci-lint's choice of checks; both must be clean.
"$tools/staticcheck" -tags all_extras -checks 'all,-ST1000,-ST1003,-ST1005,-ST1020,-ST1021,-ST1022,-QF1001,-QF1008,-QF1011' ./...
"$tools/golangci-lint" run ./...
