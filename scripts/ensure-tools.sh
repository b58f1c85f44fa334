#!/usr/bin/env bash
# Installs what the demo and the tests need beyond Go itself, so a fresh
# Debian/Ubuntu machine needs only `make demo` and `make test`. Each caller
# says what it runs, and gets only what that needs:
#
#   ensure-tools.sh demo   make demo: a local sandbox with a blocked network
#                          and its files on a local S3 server
#     bubblewrap      the local sandbox backend
#     util-linux      prlimit, which enforces sandbox memory limits
#     e2fsprogs       mkfs.ext4: each local sandbox's disk is an ext4 image
#     versitygw       a real S3 gateway (go install)
#
#   ensure-tools.sh        make test, make airflow-e2e: all of the above, and
#     util-linux      unshare and nsenter, with which the network tests run
#                     in a network namespace of their own
#     slirp4netns     the private network of an open-network local sandbox
#     iproute2        ip: the network tests make a stand-in internet (a veth
#                     pair to a namespace of its own)
#     python3-yaml    tests cross-check packed manifests with PyYAML (Airflow's
#                     parser) and probe the seccomp filter with python3
#     fake-gcs-server a Cloud Storage emulator for the storage tests (go install)
#     azurite         Microsoft's Azure Storage emulator for the storage tests
#                     (npm, about 100 s the first time; needs nodejs, npm)
#
#   ensure-tools.sh celery (make airflow-e2e EXECUTOR=celery): everything
#   above, and what the CeleryExecutor run needs:
#     redis-server    the Celery broker
#     postgresql      the metadata database and Celery result backend
#     iproute2        ip netns: a network namespace per worker
#     util-linux      unshare (a hostname and PID namespace per worker),
#                     setpriv (PostgreSQL runs as nobody when started by root)
#   ensure-tools.sh edge (make airflow-e2e EXECUTOR=edge): the same but Redis:
#   the Edge executor has no broker.
# The run starts instances of its own; the system services are not used.
# Debian packages need root (or sudo); without either it says what to run.
set -euo pipefail

what=${1:-test}
case "$what" in
  demo | test | celery | edge) ;;
  *) echo "usage: $0 [demo|test|celery|edge] (got $what)" >&2; exit 2 ;;
esac
demo_only=false
[ "$what" = demo ] && demo_only=true

need=()
if [ "$what" = celery ] || [ "$what" = edge ]; then
  [ "$what" = edge ] || command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  { command -v unshare && command -v setpriv; } >/dev/null 2>&1 || need+=(util-linux)
fi
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v prlimit >/dev/null 2>&1 || need+=(util-linux)
{ command -v mkfs.ext4 || [ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ]; } >/dev/null 2>&1 || need+=(e2fsprogs)
if ! $demo_only; then
  { command -v unshare && command -v nsenter; } >/dev/null 2>&1 || need+=(util-linux)
  command -v slirp4netns >/dev/null 2>&1 || need+=(slirp4netns)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  /usr/bin/python3 -c 'import yaml' >/dev/null 2>&1 || need+=(python3 python3-yaml)
  if ! command -v azurite-blob >/dev/null 2>&1 && ! command -v npm >/dev/null 2>&1; then need+=(nodejs npm); fi
fi
# A package named twice (util-linux) is installed once.
mapfile -t need < <(printf '%s\n' ${need[@]+"${need[@]}"} | awk 'NF && !seen[$0]++')

"$(dirname "$0")/apt-install.sh" ${need[@]+"${need[@]}"}

gobin="$(go env GOPATH)/bin"
if [ ! -x "$gobin/versitygw" ] && ! command -v versitygw >/dev/null 2>&1; then
  echo "installing versitygw (S3 gateway) with go install ..." >&2
  go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi

if $demo_only; then
  exit 0
fi

if [ ! -x "$gobin/fake-gcs-server" ] && ! command -v fake-gcs-server >/dev/null 2>&1; then
  echo "installing fake-gcs-server (GCS emulator) with go install ..." >&2
  go install github.com/fsouza/fake-gcs-server@v1.56.1
fi

if ! command -v azurite-blob >/dev/null 2>&1; then
  echo "installing azurite (Azure Storage emulator) with npm ..." >&2
  npm install -g --no-fund --no-audit azurite@3.37.0 >/dev/null
fi
