#!/usr/bin/env bash
# Runs every test of the workspace: installs the pinned Node tooling (anvil,
# solc-js, the official x402 clients, playwright-core) and Debian's chromium,
# makes sure a Redis answers at
# REDIS_URL (starting one if not, and stopping it afterwards), starts a Redis
# Cluster for the run (REDIS_CLUSTER_URLS, unless set), then runs
# `cargo test` over the whole workspace with every feature.
set -euo pipefail
cd "$(dirname "$0")/.."

export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
# A one-off full run gains nothing from incremental caches, which take
# gigabytes of disk; set CARGO_INCREMENTAL=1 to keep them.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

need() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
  else
    echo "missing: $* (install it and run again)" >&2
    exit 1
  fi
}

# Node tooling, pinned by tests/js/package-lock.json.
need node || apt_install nodejs npm
if [ ! -x tests/js/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil ] \
  || [ tests/js/package-lock.json -nt tests/js/node_modules/.package-lock.json ]; then
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi

# Headless Chromium for the browser paywall test (tests/tests/browser_paywall.rs,
# driven by the pinned playwright-core): Debian's package.
need chromium || need chromium-browser || [ -n "${CHROMIUM:-}" ] || apt_install chromium

# Redis: use the one at REDIS_URL, or start one for this run.
need redis-server || apt_install redis-server redis-tools
started_redis=""
redis_port=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+)(/.*)?$#\1#')
if ! redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1; then
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "/tmp/x402-test-redis-$redis_port.pid" >/dev/null
  started_redis="/tmp/x402-test-redis-$redis_port.pid"
  for _ in $(seq 50); do redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
started_cluster=""
cleanup() {
  if [ -n "$started_redis" ] && [ -f "$started_redis" ]; then
    kill "$(cat "$started_redis")" 2>/dev/null || true
  fi
  if [ -n "$started_cluster" ]; then
    bash scripts/redis-cluster.sh stop || true
  fi
}
trap cleanup EXIT

# Redis Cluster (three primaries and three replicas on free loopback ports,
# scripts/redis-cluster.sh) for the tests of the stores on a cluster, unless
# REDIS_CLUSTER_URLS names one; stopped afterwards.
if [ -z "${REDIS_CLUSTER_URLS:-}" ]; then
  export X402_CLUSTER_DIR="${X402_CLUSTER_DIR:-/tmp/x402-test-cluster-$$}"
  started_cluster=1
  cluster_line=$(bash scripts/redis-cluster.sh start)
  export REDIS_CLUSTER_URLS="${cluster_line#REDIS_CLUSTER_URLS=}"
fi

cargo test --workspace --all-features --no-fail-fast "$@"

# The conformance suite's scenario count per adapter, shown (cargo captures a
# passing test's output otherwise).
cargo test -p x402-tests --all-features --quiet \
  --test conformance_axum --test conformance_tower --test conformance_actix \
  scenario_count -- --nocapture
