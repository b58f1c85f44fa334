#!/usr/bin/env bash
# `make opensandbox-e2e`: the OpenSandbox backend against the real
# lifecycle server, opensandbox-server (pinned in
# python/opensandbox-server.lock), on a Docker engine of its own:
#
#   1. Debian's docker.io and mmdebstrap, installed when missing;
#   2. dockerd with its own bridge (agwose2e0, 198.19.77.1/24: a range for
#      benchmarks, never routed), no NAT, no iptables or forwarding changes,
#      overlay2 (vfs where overlay2 cannot run), its data under a temporary
#      directory;
#   3. images built here, no registry: a Debian minbase root file system
#      (mmdebstrap, cached by its recipe under $XDG_CACHE_HOME) imported as
#      the sandbox image, and on it the execd image (/execd and
#      /bootstrap.sh, as the server expects) and the egress sidecar's
#      image. The binaries: OPENSANDBOX_EXECD_BIN and OPENSANDBOX_EGRESS_BIN
#      when given (built from OpenSandbox's source: docs/opensandbox-execd.md),
#      else the stand-ins of testing/osstandin, built statically here;
#   4. opensandbox-server in .venv-opensandbox, on 127.0.0.1 with an API key,
#      publishing sandbox ports on 127.0.0.1 only, egress mode dns+nft and a
#      lifetime cap of an hour;
#   5. e2e/opensandbox's tests: the conformance suite through the server
#      proxy and direct endpoints, a create with an image the server has
#      not got, a lifetime over the cap, provision -> run -> export ->
#      destroy through the standard binary; then the server again in
#      egress mode dns, where the suite's no-network test must fail.
#
# It prints `opensandbox-server <version>: conformance <P> passed, <F>
# failed` and `missing image: final`, and stops everything it started
# (server, containers, dockerd and its containerd, the bridge, mounts).
#
# Against a deployment of your own instead (no Docker here, nothing
# started): OPENSANDBOX_E2E_DOMAIN=host:port OPENSANDBOX_E2E_API_KEY=...
# OPENSANDBOX_E2E_IMAGE=<an image on it with bash and coreutils>
# OPENSANDBOX_E2E_PROBE_IP=<an address of this machine its sandboxes
# reach without a policy> OPENSANDBOX_E2E_EGRESS_MODE=dns+nft (docs/backends.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
log() { echo "opensandbox-e2e: $*" >&2; }

bridge=agwose2e0
bridge_ip=198.19.77.1

# run_tests MODE PATTERN: e2e/opensandbox's tests matching PATTERN against
# the deployment in the environment, the server's egress mode being MODE.
run_tests() {
  OPENSANDBOX_E2E_EGRESS_MODE="$1" go test -tags opensandbox_e2e -count=1 -v -timeout 40m \
    -run "$2" ./e2e/opensandbox/ 2>&1 | tee -a "$test_log"
}

summary() {
  local version="$1" passed failed
  passed=$(grep -cE '^\s+--- PASS: TestConformance/[^/]+/[^/ ]+ ' "$test_log" || true)
  failed=$(grep -cE '^\s+--- FAIL: TestConformance/[^/]+/[^/ ]+ ' "$test_log" || true)
  echo "opensandbox-server $version: conformance $passed passed, $failed failed"
  grep -E '^missing image: ' "$test_log" | tail -n 1 || echo "missing image: not run"
}

if [ -n "${OPENSANDBOX_E2E_DOMAIN:-}" ]; then
  test_log=$(mktemp)
  trap 'rm -f "$test_log"' EXIT
  mode="${OPENSANDBOX_E2E_EGRESS_MODE:-dns+nft}"
  status=0
  if [ "$mode" = dns ]; then
    run_tests dns '^TestDNSModeLetsAddressesThrough$' || status=$?
  else
    run_tests "$mode" '^(TestConformance|TestMissingImageIsFinal|TestLifetimeCapIsNamed|TestStandardBinaryPipeline)$' || status=$?
  fi
  summary "at $OPENSANDBOX_E2E_DOMAIN"
  exit "$status"
fi

[ "$(id -u)" -eq 0 ] || { echo "opensandbox-e2e: needs root (dockerd, a bridge); run it as root or with sudo" >&2; exit 1; }
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
./scripts/apt-install.sh "${need[@]}"
docker_cli=/usr/bin/docker # docker.io's client, of the engine's own version
[ -x "$docker_cli" ] || docker_cli=$(command -v docker)

state=$(mktemp -d /tmp/agw-opensandbox-e2e.XXXXXX)
test_log="$state/tests.log"
sock="$state/docker.sock"
dockerd_pid= server_pid=
export DOCKER_HOST="unix://$sock"
dk() { "$docker_cli" "$@"; }

# teardown stops what this run started, in reverse order, and checks that
# nothing is left: containers, dockerd (and the containerd it started), the
# bridge, mounts under the state directory.
teardown() {
  set +e
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  if [ -n "$dockerd_pid" ]; then
    ids=$(dk ps -aq 2>/dev/null)
    [ -z "$ids" ] || dk rm -f $ids >/dev/null 2>&1
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$dockerd_pid" 2>/dev/null
  fi
  # The containerd dockerd started stops with it; make sure, by its pid.
  cpid=$(cat "$state/exec/containerd/containerd.pid" 2>/dev/null)
  [ -z "$cpid" ] || ! kill -0 "$cpid" 2>/dev/null || { kill "$cpid"; sleep 1; kill -9 "$cpid" 2>/dev/null; }
  findmnt -rn -o TARGET | grep -F "$state" | sort -r | while read -r m; do umount -l "$m"; done
  ip link del "$bridge" 2>/dev/null
  rm -rf "$state"
  left=$( { pgrep -f -- "$state"; findmnt -rn -o TARGET | grep -F "$state"; ip -br link show "$bridge" 2>/dev/null; } | wc -l)
  [ "$left" -eq 0 ] || log "WARNING: $left processes, mounts or links of this run are left"
}
trap teardown EXIT

start_dockerd() {
  local driver="$1"
  dockerd --bridge="$bridge" --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false \
    --storage-driver="$driver" --data-root="$state/docker" --exec-root="$state/exec" \
    --pidfile="$state/dockerd.pid" -H "$DOCKER_HOST" \
    --containerd-namespace=agw-e2e --containerd-plugins-namespace=agw-e2e-plugins \
    >"$state/dockerd-$driver.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 120); do
    dk version >/dev/null 2>&1 && return 0
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null || true
  dockerd_pid=
  return 1
}

t0=$(date +%s)
if ip link show "$bridge" >/dev/null 2>&1; then
  echo "opensandbox-e2e: the bridge $bridge exists: another run is going on, or one was killed (ip link del $bridge)" >&2
  exit 1
fi
ip link add "$bridge" type bridge
ip addr add "$bridge_ip/24" dev "$bridge"
ip link set "$bridge" up
if ! start_dockerd overlay2; then
  log "dockerd cannot run with overlay2 here ($(tail -n 1 "$state/dockerd-overlay2.log")); using vfs"
  start_dockerd vfs || { cat "$state/dockerd-vfs.log" >&2; exit 1; }
fi
log "dockerd $(dk version -f '{{.Server.Version}}') up ($(dk info -f '{{.Driver}}'))"

# The sandbox image: Debian's minbase, plus nftables and iptables for the
# real egress sidecar, which runs on it too.
suite=bookworm
packages=iptables,nftables
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-go-worker/opensandbox-e2e"
rootfs="$cache/minbase-$suite-$(echo "$packages" | sha256sum | cut -c1-12).tar"
if [ ! -s "$rootfs" ]; then
  mkdir -p "$cache"
  log "building a Debian $suite minbase root file system (mmdebstrap, 2-3 minutes) ..."
  mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" "$suite" "$rootfs.partial" >"$state/mmdebstrap.log" 2>&1 \
    || { cat "$state/mmdebstrap.log" >&2; exit 1; }
  mv "$rootfs.partial" "$rootfs"
fi
image=airflow-go-worker-e2e/sandbox:1
dk import "$rootfs" "$image" >/dev/null

bins="$state/bins"
mkdir -p "$bins/execd" "$bins/egress"
if [ -n "${OPENSANDBOX_EXECD_BIN:-}" ]; then
  cp "$OPENSANDBOX_EXECD_BIN" "$bins/execd/execd"; execd_kind="real execd ($OPENSANDBOX_EXECD_BIN)"
else
  CGO_ENABLED=0 go build -trimpath -o "$bins/execd/execd" ./testing/osstandin/execd; execd_kind="execd stand-in"
fi
if [ -n "${OPENSANDBOX_EGRESS_BIN:-}" ]; then
  cp "$OPENSANDBOX_EGRESS_BIN" "$bins/egress/egress"; egress_kind="real egress ($OPENSANDBOX_EGRESS_BIN)"
else
  CGO_ENABLED=0 go build -trimpath -o "$bins/egress/egress" ./testing/osstandin/egress; egress_kind="egress stand-in"
fi
# What the server reads from the execd image: /execd, and /bootstrap.sh,
# which it installs as the sandbox's entrypoint: start execd, then run the
# sandbox's own entrypoint, forwarding SIGTERM to it.
cat >"$bins/execd/bootstrap.sh" <<'EOF'
#!/bin/sh
/opt/opensandbox/execd &
"$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null' TERM
wait $pid
EOF
chmod 0755 "$bins/execd/execd" "$bins/execd/bootstrap.sh" "$bins/egress/egress"
printf 'FROM %s\nCOPY execd /execd\nCOPY bootstrap.sh /bootstrap.sh\n' "$image" >"$bins/execd/Dockerfile"
printf 'FROM %s\nCOPY egress /egress\nENTRYPOINT ["/egress"]\n' "$image" >"$bins/egress/Dockerfile"
dk build -q -t airflow-go-worker-e2e/execd:1 "$bins/execd" >/dev/null 2>"$state/build.log" || { cat "$state/build.log" >&2; exit 1; }
dk build -q -t airflow-go-worker-e2e/egress:1 "$bins/egress" >/dev/null 2>"$state/build.log" || { cat "$state/build.log" >&2; exit 1; }
log "images built: $image, with the $execd_kind and the $egress_kind ($(( $(date +%s) - t0 )) s so far)"

# opensandbox-server in a venv of its own, from the pinned closure.
venv="${OPENSANDBOX_VENV:-$root/.venv-opensandbox}"
lock=python/opensandbox-server.lock
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if ! [ -x "$venv/bin/opensandbox-server" ] || [ "$(cat "$venv/.lock.sha256" 2>/dev/null)" != "$want" ]; then
  log "installing opensandbox-server into $venv from $lock (first run: 1-3 min) ..."
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$lock" >&2
  "$venv/bin/python" -m pip check >&2
  echo "$want" >"$venv/.lock.sha256"
fi
version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("opensandbox-server"))')

port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
api_key=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
# start_server MODE: the server on 127.0.0.1:$port, egress mode MODE.
start_server() {
  cat >"$state/server.toml" <<EOF
[server]
host = "127.0.0.1"
port = $port
api_key = "$api_key"
max_sandbox_timeout_seconds = 3600

[runtime]
type = "docker"
execd_image = "airflow-go-worker-e2e/execd:1"

[store]
type = "sqlite"
path = "$state/opensandbox.db"

[docker]
network_mode = "bridge"
publish_host = "127.0.0.1"
drop_capabilities = ["AUDIT_WRITE", "MKNOD", "NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_MODULE", "SYS_PTRACE", "SYS_TIME", "SYS_TTY_CONFIG"]
no_new_privileges = true
pids_limit = 4096

[ingress]
mode = "direct"

[egress]
image = "airflow-go-worker-e2e/egress:1"
mode = "$1"
EOF
  "$venv/bin/opensandbox-server" --config "$state/server.toml" >>"$state/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 120); do
    "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 30 "$state/server.log" >&2
  echo "opensandbox-e2e: opensandbox-server did not come up" >&2
  exit 1
}
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=; }

export OPENSANDBOX_E2E_DOMAIN="127.0.0.1:$port" OPENSANDBOX_E2E_API_KEY="$api_key" \
  OPENSANDBOX_E2E_IMAGE="$image" OPENSANDBOX_E2E_PROBE_IP="$bridge_ip"
start_server dns+nft
log "opensandbox-server $version on 127.0.0.1:$port, egress mode dns+nft ($(( $(date +%s) - t0 )) s so far)"
status=0
run_tests dns+nft '^(TestConformance|TestMissingImageIsFinal|TestLifetimeCapIsNamed|TestStandardBinaryPipeline)$' || status=$?
stop_server
start_server dns
log "opensandbox-server again, egress mode dns"
run_tests dns '^TestDNSModeLetsAddressesThrough$' || status=$?
stop_server
[ "$status" -eq 0 ] || tail -n 40 "$state/server.log" >&2
summary "$version"
log "done in $(( $(date +%s) - t0 )) s"
exit "$status"
