#!/usr/bin/env bash
# Servers side by side: every server is started once, then each is loaded
# in turn for a short slice, in alternating order, SLICES times over. Each
# slice's throughput is divided by the first server's in the same turn, and
# the median of those ratios is printed (and, with three servers or more,
# the median of the second's over the third's). On a shared machine whose
# speed drifts from one second to the next, this compares servers more
# closely than phases of several seconds each; bench/run.sh runs the paths
# it compares the same way, in a few longer slices a round. For each
# server it also prints the CPU time per request over all its slices: the
# server's in user space and in the kernel, the fake facilitator's (with
# LOAD=session, Redis's, when it runs on this machine) and the load
# generator's own (they share the machine's cores, so a server that costs
# its peers more shows there). Usage:
#
#   bash bench/interleaved.sh NAME=SPEC [NAME=SPEC...]
#
# SPEC is MODE[:VAR=VAL,VAR=VAL...][@BINDIR]:
#   MODE     a bench-server mode (paid-http-floor, paid-api, ...), or
#            `peer` for the x402-rs peer (built by bench/run.sh)
#   VAR=VAL  extra environment for that server
#   BINDIR   where its bench-server is (default: target/release), e.g. the
#            target directory of an older commit's worktree, to compare
#            builds
#
# Every server gets FACILITATOR_URL, a fake facilitator on loopback, unless
# LOAD=session. Knobs (environment):
#   LOAD=paid        loadgen mode: paid (GET /exact/evm/eip3009), batch
#                    (GET /batch/evm) or session (GET /session/demo on
#                    Redis at REDIS_URL, the in-process facilitator selling
#                    SESSIONS_PER sessions of 99 calls before each slice; a
#                    session-floor, session-engine or session-layer server opens as many a
#                    turn at start and each slice redeems its own share)
#   SESSIONS_PER=1000
#   SLICES=10        turns
#   SECONDS_PER=3    length of a slice, at most
#   MAX=45000        requests per slice, at most
#   CONNECTIONS=32
#   REDIS_URL=redis://127.0.0.1:6379  (LOAD=session)
#   PEER=target/peer/release/x402rs-peer
#
# Example (BENCHMARKS.md, "Paid-path futures under 1 KiB"):
#   bash bench/interleaved.sh floor=paid-http-floor paid=paid-api peer=peer
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/release"
LOAD="${LOAD:-paid}"
SLICES="${SLICES:-10}"
SECONDS_PER="${SECONDS_PER:-3}"
MAX="${MAX:-45000}"
CONNECTIONS="${CONNECTIONS:-32}"
SESSIONS_PER="${SESSIONS_PER:-1000}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
PEER="${PEER:-$ROOT/target/peer/release/x402rs-peer}"
case "$LOAD" in
    paid) LOAD_ARGS=(--mode paid --path /exact/evm/eip3009 --max-requests "$MAX") ;;
    batch) LOAD_ARGS=(--mode batch --path /batch/evm --max-requests "$MAX") ;;
    session) LOAD_ARGS=(--mode session --path /session/demo --sessions "$SESSIONS_PER") ;;
    *) echo "LOAD is paid, batch or session (got $LOAD)" >&2; exit 2 ;;
esac
[ "$#" -ge 1 ] || { sed -n '2,43p' "$0" >&2; exit 2; }
[ -x "$BIN/loadgen" ] && [ -x "$BIN/fake-facilitator" ] || {
    echo "build first: cargo build --release -p x402-loadgen --bins" >&2; exit 1; }

# OUT, PIDS, their cleanup on exit, and `listening`.
source "$ROOT/bench/lib.sh"
started() { # started LOG PID: the address, or the log and a failure
    listening "$1" "$2" || { cat "$1" >&2; return 1; }
}

FAC_ENV=() FAC_PID=()
if [ "$LOAD" != session ]; then
    env HOST=127.0.0.1 PORT=0 "$BIN/fake-facilitator" > "$OUT/fac.log" 2>&1 &
    PIDS+=("$!")
    FAC_PID=(--facilitator-pid "$!")
    FAC_ENV=(FACILITATOR_URL="http://$(started "$OUT/fac.log" "$!")")
else
    FAC_ENV=(REDIS_URL="$REDIS_URL")
    # Redis's own CPU, read like the facilitator's, when it runs here.
    redis_pid="$(redis-cli -u "$REDIS_URL" info server 2>/dev/null \
        | sed -n 's/^process_id:\([0-9]*\).*/\1/p' || true)"
    if [ -n "$redis_pid" ] && [ -r "/proc/$redis_pid/stat" ]; then
        FAC_PID=(--facilitator-pid "$redis_pid")
    fi
fi

NAMES=()
declare -A ADDR PID LOADGEN MODE
for spec in "$@"; do
    name="${spec%%=*}" rest="${spec#*=}" bin="$BIN"
    if [[ "$rest" == *@* ]]; then bin="${rest#*@}"; rest="${rest%%@*}"; fi
    mode="${rest%%:*}" extra=()
    if [[ "$rest" == *:* ]]; then IFS=, read -r -a extra <<< "${rest#*:}"; fi
    if [ "$mode" = peer ]; then
        [ -x "$PEER" ] || { echo "no x402-rs peer at $PEER (bash bench/run.sh builds it)" >&2; exit 1; }
        env PORT=0 "${FAC_ENV[@]}" "${extra[@]}" "$PEER" > "$OUT/$name.log" 2>&1 &
    else
        env -u REDIS_URL -u FACILITATOR_URL -u EVM_RPC_URL -u WEBHOOK_URL -u DEV_FUND \
            HOST=127.0.0.1 PORT=0 BENCH_PAYERS=64 BENCH_SEED=1 BENCH_SESSIONS=$((SLICES * SESSIONS_PER)) \
            "${FAC_ENV[@]}" "${extra[@]}" \
            "$bin/bench-server" "$mode" > "$OUT/$name.log" 2>&1 &
    fi
    PID[$name]="$!" MODE[$name]="$mode"
    PIDS+=("$!")
    ADDR[$name]="$(started "$OUT/$name.log" "$!")"
    LOADGEN[$name]="$bin/loadgen"
    [ -x "${LOADGEN[$name]}" ] || LOADGEN[$name]="$BIN/loadgen"
    NAMES+=("$name")
done

for turn in $(seq 1 "$SLICES"); do
    order=("${NAMES[@]}")
    if [ $((turn % 2)) = 0 ]; then
        order=()
        for ((i = ${#NAMES[@]} - 1; i >= 0; i--)); do order+=("${NAMES[$i]}"); done
    fi
    for name in "${order[@]}"; do
        args=("${LOAD_ARGS[@]}")
        if [ "${MODE[$name]}" = session-floor ] || [ "${MODE[$name]}" = session-engine ] || [ "${MODE[$name]}" = session-layer ]; then
            args=(--mode session --path /session/demo --tokens-from /__bench/sessions
                --tokens-skip $(( (turn - 1) * SESSIONS_PER )) --tokens-take "$SESSIONS_PER")
        fi
        # Seed 1 funds the payers on every dev ledger; nonces are random.
        "${LOADGEN[$name]}" --addr "${ADDR[$name]}" --label "$name" \
            --connections "$CONNECTIONS" --payers 64 --seed 1 --server-pid "${PID[$name]}" \
            "${FAC_PID[@]}" "${args[@]}" --duration "$SECONDS_PER" --expect 200 \
            > "$OUT/$name-$turn.json" 2> "$OUT/$name-$turn.err" \
            || { echo "loadgen against $name failed:" >&2; tail -n 3 "$OUT/$name-$turn.err" >&2; exit 1; }
    done
done

peer=facilitator
[ "$LOAD" = session ] && peer=Redis
python3 - "$OUT" "$SLICES" "$peer" "${NAMES[@]}" <<'PY'
import json, statistics, sys

out, slices, peer, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def field(name, key):
    return [json.load(open(f"{out}/{name}-{t}.json")).get(key) for t in range(1, slices + 1)]
first = field(names[0], "rps")
print(f"{slices} slices; each ratio is to {names[0]} in the same turn")
for name in names:
    rps = field(name, "rps")
    ratios = [a / b for a, b in zip(rps, first)]
    cpu = [c for c in field(name, "server_cpu_us_per_req") if c]
    allocs = [a for a in field(name, "allocations_per_req") if a is not None]
    print(f"{name:<12} req/s median {statistics.median(rps):8.0f}   ratio median "
          f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})   "
          f"server CPU/req median {statistics.median(cpu) if cpu else float('nan'):.1f} us   "
          f"allocations/req {allocs[0] if allocs else float('nan')}")
    # CPU per request over all slices (total seconds over total requests):
    # the server's in user space and in the kernel, the facilitator's, and
    # the load generator's own.
    served = sum(field(name, "requests"))
    def spent(key):
        values = [(v or 0) * n for v, n in zip(field(name, key), field(name, "requests"))]
        return f"{sum(values) / served:.1f} us" if served and any(values) else "-"
    print(f"{'':<12} CPU/req over all slices: server user {spent('server_user_us_per_req')}, "
          f"kernel {spent('server_system_us_per_req')}; {peer} "
          f"{spent('facilitator_cpu_us_per_req')}; load generator "
          f"{spent('loadgen_cpu_us_per_req')}")
# The second server against the third, turn by turn (the example against
# the peer, in the usual order).
if len(names) >= 3:
    ratios = [a / b for a, b in zip(field(names[1], "rps"), field(names[2], "rps"))]
    print(f"{names[1]} / {names[2]}, turn by turn: median {statistics.median(ratios):.3f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
PY
