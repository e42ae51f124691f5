#!/usr/bin/env bash
# Instructions per paid request of whole servers, through the HTTP
# facilitator path, counted by callgrind: the load harness's paid paths
# (bench/run.sh) without the machine's noise. Each server runs under
# `valgrind --tool=callgrind` twice, serving SMALL and then LARGE paid
# requests (after the same warm-up). Only the counted run is counted
# (collection is switched on and off around it with callgrind_control), and
# the difference of the two totals over LARGE - SMALL requests is what one
# request costs, the run's own set-up excluded. It counts the server
# process's user-space instructions only (not the kernel, the load
# generator or the facilitator), one request at a time in effect (callgrind
# serialises threads). Usage, from anywhere:
#
#   bash bench/callgrind-servers.sh
#
# The session paths too, when named (they need Redis at REDIS_URL):
# session-floor (one Redis redemption from a bare handler),
# session-layer (the least a paywall layer inside axum's router does:
# one redemption, the calls left handed to the handler), session-engine
# (the example's engine alone in front of a bare handler, on sessions it
# opened as the floor does) and session-redis (the example redeeming from
# Redis). Both runs of a server
# open or buy the same sessions (30, and 3 to warm up), so what differs
# between them is redemptions alone. Counted over the whole process, as it
# was before, the example's count varied by several thousand instructions
# from run to run (the metrics clock calibrates itself for as long as it
# happens to take); over the counted run alone, repeated runs agree within
# a few hundred.
#
# Knobs: SERVERS="http-floor paid-http-engine paid-http-noprecheck paid-http
# paid-http-newpayers http-peer" (any of them, and session-floor
# session-layer session-engine session-redis; paid-http-newpayers recovers
# every payment's signer, BENCH_KNOWN_PAYERS=0), SMALL=300, LARGE=1500 (at
# most 2 970 for the session paths), CONNECTIONS=8, REDIS_URL,
# SKIP_PEER=1, CACHE_SIM=1 (below), KEEP=DIR (keeps each run's callgrind output there, as
# NAME-REQUESTS.cg, for callgrind_annotate); BIN=DIR and PEER=FILE use
# binaries built already instead of building them. Needs valgrind (and its
# callgrind_control). About 10 minutes plus the release builds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SERVERS=" ${SERVERS:-http-floor paid-http-engine paid-http-noprecheck paid-http paid-http-newpayers http-peer} "
SMALL="${SMALL:-300}"
# CACHE_SIM=1: callgrind also simulates the caches (its default geometry,
# one level-1 pair and a last level, one thread's view: no other core
# takes lines away) and reports misses per request beside the
# instructions. Slower, and a model: it shows which server touches more
# memory, not what the machine's caches do.
CACHE_SIM="${CACHE_SIM:-}"
SIM=()
[ -n "$CACHE_SIM" ] && SIM=(--cache-sim=yes)
LARGE="${LARGE:-1500}"
CONNECTIONS="${CONNECTIONS:-8}"
WARMUP=200
SEED=7
PAYERS=64
log() { echo "[callgrind-servers] $*" >&2; }

command -v valgrind >/dev/null || { log "valgrind is not installed (apt-get install valgrind)"; exit 1; }
# callgrind_control reaches the server through vgdb, whose pipes are named
# after USER (unset in some containers): the server and it must agree.
VG_USER="${USER:-$(id -un)}"
[ "$LARGE" -gt "$SMALL" ] || { log "LARGE must exceed SMALL"; exit 1; }

# OUT, PIDS, their cleanup on exit, and `listening`.
source "$ROOT/bench/lib.sh"

TARGET_DIR="$(cargo metadata --format-version 1 --no-deps 2>/dev/null \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
if [ -z "${BIN:-}" ]; then
    log "building (release)"
    cargo build --release -p x402-loadgen --bins 2>&1 | tail -n 1 >&2
    BIN="${TARGET_DIR:-$ROOT/target}/release"
fi
PEER="${PEER:-}"
if [ -z "$PEER" ] && [ "${SKIP_PEER:-0}" != 1 ] && [[ "$SERVERS" == *" http-peer "* ]]; then
    log "building the x402-rs peer (bench/peer-x402rs)"
    if CARGO_TARGET_DIR="${TARGET_DIR:-$ROOT/target}/peer" cargo build --release --locked \
        --manifest-path bench/peer-x402rs/Cargo.toml > "$OUT/peer-build.log" 2>&1; then
        PEER="${TARGET_DIR:-$ROOT/target}/peer/release/x402rs-peer"
    else
        log "the peer did not build: its row is skipped"
    fi
fi

env HOST=127.0.0.1 PORT=0 "$BIN/fake-facilitator" > "$OUT/ff.out" 2> "$OUT/ff.log" &
PIDS+=("$!")
FACILITATOR="$(listening "$OUT/ff.out")" || { log "the fake facilitator did not start"; exit 1; }

# count SERVER N: total instructions of SERVER serving WARMUP + N requests
count() {
    local name="$1" n="$2" cmd=() precheck=1 known=1 redis=()
    # The load: warm-up, then the counted run.
    local warm=(--mode paid --path /exact/evm/eip3009 --seed $((SEED + 100)))
    local load=(--mode paid --path /exact/evm/eip3009 --seed $((SEED + 200)))
    case "$name" in
        session-floor|session-layer|session-engine|session-redis)
            redis=(REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}" BENCH_SESSIONS=33)
            warm=(--mode session --path /session/demo --seed "$SEED")
            load=("${warm[@]}")
            if [ "$name" != session-redis ]; then
                cmd=("$BIN/bench-server" "$name")
                warm+=(--tokens-from /__bench/sessions --tokens-take 3)
                load+=(--tokens-from /__bench/sessions --tokens-skip 3 --tokens-take 30)
            else
                cmd=("$BIN/bench-server" paid-api)
                warm+=(--sessions 3)
                load+=(--sessions 30)
            fi ;;
    esac
    case "$name" in
        http-floor) cmd=("$BIN/bench-server" paid-http-floor) ;;
        paid-http-engine) cmd=("$BIN/bench-server" paid-http-engine); precheck=0 ;;
        paid-http-noprecheck) cmd=("$BIN/bench-server" paid-api); precheck=0 ;;
        paid-http) cmd=("$BIN/bench-server" paid-api) ;;
        paid-http-newpayers) cmd=("$BIN/bench-server" paid-api); known=0 ;;
        http-peer) cmd=("$PEER") ;;
    esac
    local cg="$OUT/$name-$n.cg"
    # The environment is set before valgrind: it follows no exec.
    env -u REDIS_URL -u EVM_RPC_URL -u WEBHOOK_URL HOST=127.0.0.1 PORT=0 \
        BENCH_PAYERS="$PAYERS" BENCH_SEED="$SEED" FACILITATOR_URL="http://$FACILITATOR" "${redis[@]}" \
        BENCH_LOCAL_PRECHECK="$precheck" BENCH_KNOWN_PAYERS="$known" USER="$VG_USER" \
        valgrind --tool=callgrind --instr-atstart=no "${SIM[@]}" --callgrind-out-file="$cg" "${cmd[@]}" \
        > "$OUT/$name.log" 2>&1 &
    local pid="$!"
    # This runs in a command substitution, which the EXIT trap does not
    # cover: a failure stops the server here.
    fail() {
        log "$1"; cat "$2" >&2
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        exit 1
    }
    toggle() {
        env HOST=127.0.0.1 USER="$VG_USER" callgrind_control --instr="$1" "$pid" > "$OUT/toggle.log" 2>&1 \
            || fail "callgrind_control --instr=$1 failed" "$OUT/toggle.log"
    }
    local addr
    addr="$(listening "$OUT/$name.log")" || fail "$name did not start" "$OUT/$name.log"
    for run in warm load; do
        local requests="$n" args=("${load[@]}")
        [ "$run" = warm ] && requests="$WARMUP" args=("${warm[@]}")
        # Only the counted run is counted: start-up and the warm-up (where
        # one-off work such as the metrics clock's calibration runs for as
        # long as it happens to take) are not.
        [ "$run" = load ] && toggle on
        "$BIN/loadgen" --addr "$addr" --connections "$CONNECTIONS" --payers "$PAYERS" \
            "${args[@]}" --duration 600 \
            --max-requests "$requests" --expect 200 > "$OUT/lg.json" 2> "$OUT/lg.err" \
            || fail "loadgen against $name failed" "$OUT/lg.err"
        grep -q "\"ok\":$requests," "$OUT/lg.json" \
            || fail "$name did not answer every request with 200" "$OUT/lg.json"
    done
    toggle off
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$cg" "$KEEP/"
    # With collection toggled, callgrind's summary line reads 0 and its
    # totals line holds the counts (Ir, then the simulated cache's events
    # with CACHE_SIM=1).
    sed -n 's/^totals: //p' "$cg" | head -n 1
}

echo "== instructions per paid request or session call (callgrind, server process, $SMALL and $LARGE requests)"
if [ -n "$CACHE_SIM" ]; then
    printf '%-22s %14s %12s %12s %12s %12s\n' server "Ir/request" "D1 read miss" "D1 write miss" "LL miss" "I1 miss"
else
    printf '%-22s %14s\n' server "Ir/request"
fi
for name in http-floor paid-http-engine paid-http-noprecheck paid-http paid-http-newpayers http-peer \
    session-floor session-layer session-engine session-redis; do
    [[ "$SERVERS" == *" $name "* ]] || continue
    [ "$name" = http-peer ] && [ -z "$PEER" ] && continue
    small=($(count "$name" "$SMALL"))
    large=($(count "$name" "$LARGE"))
    per() { echo $(( (large[$1] - small[$1]) / (LARGE - SMALL) )); }
    if [ -n "$CACHE_SIM" ]; then
        # Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
        printf '%-22s %14d %12d %12d %12d %12d\n' "$name" "$(per 0)" "$(per 4)" "$(per 5)" \
            $(( $(per 6) + $(per 7) + $(per 8) )) "$(per 3)"
    else
        printf '%-22s %14d\n' "$name" "$(per 0)"
    fi
done
