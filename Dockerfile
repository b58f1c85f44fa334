# syntax=docker/dockerfile:1
#
# Builds airflow-go-worker, packs it into a self-contained AFBNDL01 bundle and
# installs the bundle into an Airflow worker image.
#
#   docker build -t airflow-go-worker .
#   docker build --build-arg BUNDLE_CONFIG=examples/conversion/bundle.yaml \
#                --build-arg TAGS=backend_modal,store_s3 -t airflow-conversion .
#
# TAGS are the go build tags of the extras the binary links beyond the local
# backend and file:// (store_s3 for s3:// URLs, backend_modal,
# backend_opensandbox, store_gcs, store_azure, comma-separated, or
# all_extras; see docs/getting-started.md, Choosing backends and stores): pack refuses a
# config naming one the binary lacks, with the tag that adds it.
#
# How Airflow finds the bundle: the ExecutableCoordinator configured in
# [sdk] coordinators scans every directory in its executables_root kwarg for
# executable files ending in an AFBNDL01 footer, and runs the one whose
# manifest lists the task's dag_id. EXECUTABLES_DIR below must therefore be
# one of those directories, e.g. in airflow.cfg (or AIRFLOW__SDK__COORDINATORS
# and AIRFLOW__SDK__QUEUE_TO_COORDINATOR):
#
#   [sdk]
#   coordinators = {"go": {"classpath": "airflow.sdk.coordinators.executable.ExecutableCoordinator",
#                          "kwargs": {"executables_root": ["/opt/airflow/executables"]}}}
#   queue_to_coordinator = {"golang": "go"}
#
# The image does not set those variables itself: an ENV here would silently
# override the deployment's airflow.cfg.

ARG GO_IMAGE=golang:1.26
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2

# ---- build: compile, then pack -------------------------------------------
# pack runs the new binary with --airflow-metadata, so this stage must run on
# the target platform (under buildx, cross-platform builds use emulation).
FROM ${GO_IMAGE} AS build
WORKDIR /src

# Module downloads are cached in their own layer, rebuilt only when
# go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
# A static, reproducible binary: no cgo (the Airflow image's libc does not
# matter) and no local paths baked in.
ARG TAGS=""
RUN CGO_ENABLED=0 go build -trimpath -tags "${TAGS}" -ldflags="-s -w" -o /out/airflow-go-worker ./cmd/airflow-go-worker

# BUNDLE_CONFIG (optional): a YAML bundle config, relative to the build
# context, whose tasks the bundle registers; it is packed into the bundle's
# source region, which the bundle reads at run time.
ARG BUNDLE_CONFIG=""
# The Airflow release in AIRFLOW_IMAGE, which decides the supervisor schema
# version the bundle declares (3.3: 2026-06-16, 3.4: 2026-10-30): the
# coordinator rejects a bundle whose version it does not know.
ARG AIRFLOW_VERSION=3.3
ARG BUNDLE_NAME=airflow-go-worker.bundle
# The stripped binary is packed as it is: the footer hashes the exact bytes,
# so nothing may modify the binary after this step.
RUN set -eu; \
    mkdir -p /out/bundle; \
    if [ -n "${BUNDLE_CONFIG}" ]; then set -- --config "${BUNDLE_CONFIG}"; else set --; fi; \
    /out/airflow-go-worker pack \
        --executable /out/airflow-go-worker \
        --output "/out/bundle/${BUNDLE_NAME}" \
        --airflow "${AIRFLOW_VERSION}" \
        "$@"; \
    /out/airflow-go-worker inspect --airflow "${AIRFLOW_VERSION}" "/out/bundle/${BUNDLE_NAME}" > /dev/null

# ---- runtime: the Airflow worker with the bundle installed ---------------
FROM ${AIRFLOW_IMAGE}
ARG EXECUTABLES_DIR=/opt/airflow/executables
ARG BUNDLE_NAME=airflow-go-worker.bundle

# The coordinator only considers regular files the worker user can execute;
# pack wrote the bundle with mode 0755 and COPY keeps it.
COPY --from=build --chown=airflow:0 /out/bundle/${BUNDLE_NAME} ${EXECUTABLES_DIR}/${BUNDLE_NAME}

USER airflow
