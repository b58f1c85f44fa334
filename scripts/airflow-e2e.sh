#!/usr/bin/env bash
# `make airflow-e2e`: the examples on a real Airflow 3.3 scheduler, on this
# machine. It installs what is missing (scripts/ensure-tools.sh: bubblewrap,
# prlimit, versitygw; scripts/ensure-venv.sh: the pinned Airflow in .venv),
# builds the bundle binaries (airflow-go-worker with every extra, EXTRAS=all:
# the examples' configs name Modal), then hands over to the Go driver in
# e2e/airflow, which starts Airflow (scheduler, dag-processor, api-server;
# LocalExecutor, SQLite), versitygw, the fake Modal server and a scripted
# OpenAI-compatible model server on 127.0.0.1 in a temporary directory, runs
# the example Dags as shipped (on backend: modal, triggered without a
# conf; orders_report is started by the scheduler, on the asset event
# sandbox_conversion's run emits; mapped_conversion fans out over three
# objects; sandbox_pipeline runs a second time with its middle task failed
# and must end failed; agent_handoff's AgentOperator talks to the scripted
# model, and runs a second time with the model down; stub_semantics runs
# Go stubs beside their Python twins, and stub_refused, from e2e/airflow/
# testdata, what `check` refuses), prints `DAG_ID RUN_ID STATE` per run
# and stops everything it started. Extra arguments go to the driver (e.g.
# -keep to keep the Airflow home and logs). Exit 0 only if every run ended
# as expected (the failed-middle-task, model-down, stub_semantics and
# stub_refused runs failed, the others succeeded), passed its checks, and
# no sandbox was left.
#
# EXECUTOR=celery runs the driver's CeleryExecutor mode instead (e2e/airflow
# celery.go; docs/deploying.md): PostgreSQL and Redis from Debian (installed
# if missing), two Celery workers as separate hosts in network namespaces
# of their own, 10 runs of each sandbox example at once, then a worker
# killed, Redis stopped and a bundle removed, each followed by the
# maintenance Dag. EXECUTOR=edge runs its EdgeExecutor mode (e2e/airflow
# edge.go; docs/deploying.md): PostgreSQL from Debian, two edge workers as
# separate hosts that reach only the api-server, 5 runs of each sandbox
# example at once, then a worker killed mid-task and restarted, followed by
# the maintenance Dag. Network namespaces need root: not root, it goes
# through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
executor="${EXECUTOR:-local}"
case "$executor" in
  local|celery|edge) ;;
  *) echo "airflow-e2e: EXECUTOR=$executor: want local, celery or edge" >&2; exit 2 ;;
esac

# Before the driver takes over, each step runs in the background under a
# time limit, with a progress line every 30 s; a signal stops it.
child=""
trap 'if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi; exit 130' INT TERM
# step LIMIT WHAT CMD...: runs CMD, killed after LIMIT (timeout(1) syntax).
step() {
  local limit=$1 what=$2; shift 2
  echo "==> [$(date +%T)] $what"
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" & child=$!
  while ! wait_for "$child" 30; do echo "    ... still $what ($((SECONDS - start))s)"; done
  local rc=0; wait "$child" || rc=$?; child=""
  if [ "$rc" -eq 124 ]; then echo "airflow-e2e: $what did not finish within $limit" >&2; fi
  if [ "$rc" -ne 0 ]; then echo "airflow-e2e: $what failed (exit $rc); see above" >&2; exit 1; fi
}
# wait_for PID SECONDS: true once PID has exited, false after SECONDS.
wait_for() { local i; for ((i = 0; i < $2; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done; ! kill -0 "$1" 2>/dev/null; }

if [ "$executor" = celery ]; then
  step 10m "installing tools (bubblewrap, prlimit, versitygw, redis-server, postgresql, iproute2)" ./scripts/ensure-tools.sh celery
elif [ "$executor" = edge ]; then
  step 10m "installing tools (bubblewrap, prlimit, versitygw, postgresql, iproute2)" ./scripts/ensure-tools.sh edge
else
  step 10m "installing tools (bubblewrap, prlimit, versitygw, ...)" ./scripts/ensure-tools.sh test
fi
pyfile="$(mktemp)"; trap 'rm -f "$pyfile"' EXIT
step 20m "installing the pinned Airflow into the venv (python/requirements.lock)" sh -c './scripts/ensure-venv.sh > "$1"' sh "$pyfile"
venv="$(dirname "$(dirname "$(cat "$pyfile")")")"
echo "    $venv"
mkdir -p bin
step 15m "building airflow-go-worker, the go_tasks example and the driver" sh -c '
  CGO_ENABLED=0 go build -trimpath -buildvcs=auto -tags all_extras -o bin/airflow-go-worker ./cmd/airflow-go-worker &&
  CGO_ENABLED=0 go build -trimpath -o bin/go_tasks ./examples/go_tasks &&
  go build -trimpath -o bin/airflow-e2e ./e2e/airflow'

trap - INT TERM
rm -f "$pyfile"; trap - EXIT
driver=(bin/airflow-e2e -executor "$executor" -venv "$venv" -worker bin/airflow-go-worker -go-tasks bin/go_tasks -repo . "$@")
if [ "$executor" != local ] && [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "airflow-e2e: EXECUTOR=$executor makes network namespaces, which needs root or sudo" >&2; exit 1; }
  # versitygw may be in this user's GOPATH: keep PATH.
  exec sudo env "PATH=$PATH:$(go env GOPATH)/bin" "${driver[@]}"
fi
exec "${driver[@]}"
