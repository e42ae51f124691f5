#!/usr/bin/env bash
# A Redis Cluster on loopback for the tests: six redis-server processes
# (three primaries, three replicas) on free ports, in a directory of its own.
#
#   bash scripts/redis-cluster.sh start   # prints REDIS_CLUSTER_URLS=...
#   bash scripts/redis-cluster.sh urls    # the running cluster's URLs
#   bash scripts/redis-cluster.sh stop
#
# The directory is X402_CLUSTER_DIR (default /tmp/x402-redis-cluster-$UID);
# it holds each node's pid, log and nodes.conf, and `urls`. Nodes run with
# `cluster-require-full-coverage no` (the slots of live primaries keep being
# served while a failed one's replica takes over) and a 2 s node timeout.
set -euo pipefail

DIR="${X402_CLUSTER_DIR:-/tmp/x402-redis-cluster-$(id -u)}"
NODES=6

# Whether something accepts connections on 127.0.0.1:$1.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Six ports, each free along with its cluster bus port (+10000).
free_ports() {
  local base port ok
  for base in $(seq 21000 50 29950); do
    ok=1
    for port in $(seq "$base" $((base + NODES - 1))); do
      if listening "$port" || listening $((port + 10000)); then ok=0; break; fi
    done
    if [ "$ok" = 1 ]; then seq "$base" $((base + NODES - 1)); return 0; fi
  done
  echo "redis-cluster.sh: no six free ports between 21000 and 30000" >&2
  return 1
}

stop() {
  [ -d "$DIR" ] || return 0
  local pidfile pid
  for pidfile in "$DIR"/*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Only a redis-server this script started.
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q redis-server; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  for pidfile in "$DIR"/*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$DIR"
}

start() {
  if [ -f "$DIR/urls" ] && redis-cli -u "$(cut -d, -f1 "$DIR/urls")" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
    echo "REDIS_CLUSTER_URLS=$(cat "$DIR/urls")"
    return 0
  fi
  stop
  mkdir -p "$DIR"
  local ports=() port
  mapfile -t ports < <(free_ports)
  for port in "${ports[@]}"; do
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
      --cluster-enabled yes --cluster-config-file "$DIR/nodes-$port.conf" \
      --cluster-node-timeout 2000 --cluster-require-full-coverage no \
      --save '' --appendonly no --dir "$DIR" \
      --pidfile "$DIR/$port.pid" --logfile "$DIR/$port.log" >/dev/null
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  done
  local hosts=()
  for port in "${ports[@]}"; do hosts+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${hosts[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 || {
    cat "$DIR/create.log" >&2
    stop
    return 1
  }
  # Every node sees every slot served before the tests start.
  for port in "${ports[@]}"; do
    for i in $(seq 200); do
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
      if [ "$i" = 200 ]; then echo "redis-cluster.sh: node $port never reported cluster_state:ok" >&2; stop; return 1; fi
      sleep 0.05
    done
  done
  # ... and every node knows the three replicas (and each replica has synced).
  for port in "${ports[@]}"; do
    for i in $(seq 200); do
      [ "$(redis-cli -p "$port" cluster nodes 2>/dev/null | awk '$3 ~ /slave/' | wc -l)" = 3 ] && break
      if [ "$i" = 200 ]; then echo "redis-cluster.sh: node $port never saw three replicas" >&2; stop; return 1; fi
      sleep 0.05
    done
    if redis-cli -p "$port" info replication | grep -q '^role:slave'; then
      for i in $(seq 200); do
        redis-cli -p "$port" info replication | grep -q '^master_link_status:up' && break
        if [ "$i" = 200 ]; then echo "redis-cluster.sh: replica $port never synced" >&2; stop; return 1; fi
        sleep 0.05
      done
    fi
  done
  local urls=""
  for port in "${ports[@]}"; do urls="${urls:+$urls,}redis://127.0.0.1:$port"; done
  echo "$urls" >"$DIR/urls"
  echo "REDIS_CLUSTER_URLS=$urls"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  urls) cat "$DIR/urls" ;;
  *)
    echo "usage: $0 start|stop|urls" >&2
    exit 2
    ;;
esac
