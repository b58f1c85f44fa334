# The commands a new machine needs (see README.md):
#   make demo         runs the conversion example end to end on the local backend
#   make test         runs every test (CI runs it through .ci/run)
#   make airflow-e2e  runs the example Dags on a real Airflow 3.3.2 (CI runs it too)
#   make airflow-e2e EXECUTOR=celery
#                     the same on CeleryExecutor: two workers as separate hosts, then
#                     faults (a worker killed, Redis stopped, a bundle missing); needs root
#   make opensandbox-e2e
#                     the OpenSandbox backend against a real opensandbox-server on
#                     Docker (started and stopped by it; needs root; CI runs it too)
#   make build [EXTRAS="s3 modal opensandbox gcs azure" | EXTRAS=all]
#                     bin/airflow-go-worker with the backends and stores it links

GO        ?= go
BIN       := bin/airflow-go-worker
BUNDLE    := dist/airflow-go-worker.bundle
PKGS      := ./...

.PHONY: all build test vet lint fmt-check demo pack bench fuzz tools venv clean

all: build

# Backends and stores beyond the default build (local backend, file://)
# are chosen when the binary is built, like Airflow's extras (s3:// is
# one, as Airflow's amazon extra is):
#   make build EXTRAS="s3 modal opensandbox gcs azure"   (any of them)
#   make build EXTRAS=all                                (every one)
# Each is a go build tag, backend_<name> or store_<name>, on the file of that
# name in cmd/airflow-go-worker (extras.go lists them); a binary links, and
# pays at every task start for, only what it is built with.
EXTRAS ?=
EXTRA_FILES := $(notdir $(basename $(wildcard cmd/airflow-go-worker/backend_*.go cmd/airflow-go-worker/store_*.go)))
EXTRA_NAMES := $(filter-out local,$(patsubst backend_%,%,$(patsubst store_%,%,$(EXTRA_FILES))))
comma := ,
empty :=
space := $(empty) $(empty)
extra_tag = $(if $(filter all,$(1)),all_extras,$(or $(filter backend_$(1) store_$(1),$(filter-out backend_local,$(EXTRA_FILES))),$(error EXTRAS: unknown extra "$(1)"; use any of $(EXTRA_NAMES), or all)))
BUILD_TAGS := $(foreach e,$(subst $(comma),$(space),$(EXTRAS)),$(call extra_tag,$(e)))
TAGS_FLAG  := $(if $(BUILD_TAGS),-tags $(subst $(space),$(comma),$(strip $(BUILD_TAGS))))

# -buildvcs=auto stamps the git commit into the binary (bundle version) even
# where GOFLAGS turns it off; without a .git it stamps nothing.
# CGO_ENABLED=0 links statically: with cgo, package net makes the binary
# load libc through the dynamic linker at every task start (about 1.5 ms of
# CPU, e2e/startup's plain_bundle_cgo row); nothing here needs cgo.
CGO_ENABLED ?= 0
build:
	CGO_ENABLED=$(CGO_ENABLED) $(GO) build -trimpath -buildvcs=auto $(TAGS_FLAG) -o $(BIN) ./cmd/airflow-go-worker

# Tools the tests need that are not Go libraries (bubblewrap, prlimit,
# slirp4netns, PyYAML, versitygw, the GCS and Azure emulators, ...):
# installed when missing, see the script. The demo installs only its own.
tools:
	@./scripts/ensure-tools.sh test

# The pinned Python side (real Airflow task SDK, Modal client, common.ai
# provider) in .venv; tests that drive real Python packages use its python.
venv:
	@./scripts/ensure-venv.sh >/dev/null

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The extras' files are vetted too (all_extras); then golangci-lint with
# staticcheck among its linters (.golangci.yml), pinned and installed by
# scripts/lint.sh.
vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags all_extras ./cmd/airflow-go-worker
	$(GO) vet -tags arm64vm ./e2e/arm64vm
	@./scripts/lint.sh

lint:
	@./scripts/lint.sh

test: tools fmt-check vet
	AIRFLOW_GO_WORKER_PYTHON=$$(./scripts/ensure-venv.sh) $(GO) test -count=1 -timeout 25m $(PKGS)

# The demo runs a copy of examples/conversion's config on the local backend
# that names no other; its files move through a local S3 server, so its
# binary is built with the s3 extra (bin/airflow-go-worker-demo, leaving
# make build's binary as it was). The script builds it, saying so while it
# builds (2-3 minutes with an empty Go build cache).
# It needs only bubblewrap, prlimit, mkfs.ext4 and versitygw, not the
# tests' emulators (`ensure-tools.sh demo`).
DEMO_BIN := bin/airflow-go-worker-demo
demo:
	@./scripts/ensure-tools.sh demo
	BIN=$(DEMO_BIN) ./scripts/demo.sh

pack: build
	./$(BIN) pack --executable $(BIN) --output $(BUNDLE)

# Benchmarks print a table: name, then each reported metric. Fork-heavy
# benchmarks run twice (both orders of an A/B pair); the storage transfers
# of 1 GiB (./storage/s3, ./e2e) run once, each doing its A/B pair in both
# orders itself (2x would add a discarded warm-up run of 1 GiB transfers);
# micro-benchmarks run for go test's default second. e2e/realsdk forks
# pings through Airflow's own coordinator and supervisor (the pinned venv):
# all its rounds run once, whatever -benchtime says.
HEAVY_BENCH := ./sandbox/local ./sandbox/modal ./e2e/startup ./e2e/realsdk
STORAGE_BENCH := ./storage/s3 ./e2e
bench: tools
	@{ $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m $(STORAGE_BENCH) && \
	   $(GO) test -run '^$$' -bench . -benchtime 2x -timeout 60m $(HEAVY_BENCH) && \
	   $(GO) test -run '^$$' -bench . -timeout 30m $$($(GO) list $(PKGS) | grep -v -e /sandbox/local -e /sandbox/modal -e /storage -e /e2e); } \
	  | tee bench.out | ./scripts/benchtable.sh

# Each fuzz target runs for FUZZTIME (go test allows one target per run).
# New inputs are minimised for at most 5 s: go's default of 60 s per input
# stalled FuzzManifest at 0 execs/s for a minute whenever it found an input
# that expands (YAML aliases) into megabytes, which is slow to re-run.
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin dist bench.out .venv

# The third command (see README): the examples on a real Airflow 3.3.2
# scheduler started on 127.0.0.1 (LocalExecutor, SQLite), with versitygw for
# S3; prints DAG_ID RUN_ID STATE per run. ARGS go to the driver (e.g. -keep).
# EXECUTOR=celery: CeleryExecutor on PostgreSQL and Redis, each worker in a
# network namespace of its own (docs/deploying.md).
EXECUTOR ?= local
# The arm64 build on an emulated arm64 Linux (QEMU and Debian's arm64
# kernel, which the script installs and fetches): the exit holder is
# assembly of its own per architecture, and the build machine is amd64.
# .ci/run runs it; make test does not (about a minute, mostly the boot).
.PHONY: test-arm64
test-arm64:
	AIRFLOW_GO_WORKER_ARM64_KERNEL=$$(./scripts/ensure-arm64-vm.sh) $(GO) test -count=1 -timeout 20m -tags arm64vm ./e2e/arm64vm

# The OpenSandbox backend against the real opensandbox-server on a Docker
# engine this target starts and stops (root; Docker, mmdebstrap and the
# server installed when missing; scripts/opensandbox-e2e.sh says what it
# does and how to point it at a deployment of your own). .ci/run runs it.
.PHONY: opensandbox-e2e
opensandbox-e2e:
	./scripts/opensandbox-e2e.sh

.PHONY: airflow-e2e
airflow-e2e:
	EXECUTOR=$(EXECUTOR) ./scripts/airflow-e2e.sh $(ARGS)
