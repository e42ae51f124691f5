#!/usr/bin/env bash
# The load harness: builds in release mode, starts each server on 127.0.0.1,
# drives it with bench/loadgen, prints one summary, and stops everything it
# started. Usage, from the repository root or anywhere:
#
#   bash bench/run.sh
#
# Knobs (environment):
#   DURATION=10        seconds per path and round
#   ROUNDS=3           rounds of the throughput paths; each ratio is to the
#                      baseline of its own round (or to the path's floor or
#                      peer in that round), and the targets are judged on the
#                      median over the rounds
#   MEM_DURATION=60    seconds of the memory run (paid path, in-memory claims);
#                      claims are kept 900 s, so the plateau shows from about
#                      1000 s on: MEM_DURATION=1500 MEM_RATE=100 MEM_EVERY=30
#   MEM_RATE=500       requests/s of the memory run
#   MEM_EVERY=5        seconds between RSS samples in the memory run
#   MEM_VALID_FOR=60   the memory run's payments are signed as they are sent,
#                      each valid for this many seconds
#   SLICES=4           paths that are compared run side by side (the
#                      baseline and the two 402 paths; the facilitator paths:
#                      the floor, the example, the peer, ...; the two session
#                      paths): in each round their servers start together
#                      and each is loaded for SLICES slices of
#                      DURATION/SLICES seconds (and PAID_MAX/SLICES
#                      payments) in alternating order; a round's figure for
#                      a path sums its slices
#   CONNECTIONS=32     concurrent keep-alive connections
#   LOADGEN_THREADS=1  tokio worker threads of the load generator
#   PAID_MAX=60000     pre-signed payments per paid path (caps the request count,
#                      and with it the claims held: the RSS target is for about
#                      as many payments as the issue's own 10 s phases made)
#   SESSIONS=4000      sessions of 99 calls each: the session floor opens
#                      them at start, the example's run buys SESSIONS/SLICES
#                      before each slice
#   PAYERS=64          funded payers on the dev ledger
#   REDIS_URL=redis://127.0.0.1:6379   used if it answers; else a private
#                      redis-server is started on a free port (and stopped)
#   SKIP_REDIS=1       skip the Redis paths
#   SKIP_MEMORY=1      skip the 60 s memory run
#   PATHS="..."        run only these paths, of: baseline floor challenge
#                      paid-memory paid-redis http-floor paid-http
#                      paid-http-noprecheck paid-http-newpayers batch-http http-peer
#                      session-floor session-redis memory
#                      (paid-http-noprecheck: paid-http with the engine's
#                      local pre-check off, to show what the check costs;
#                      paid-http-newpayers: paid-http recovering every
#                      payment's signer, as for a server whose every payer
#                      is new, since the pre-check leaves the signatures of
#                      payers the facilitator accepted before to it)
#                      (paid-http-engine, not run by default: the engine
#                      and PaywallLayer alone, pre-check off, in front of
#                      the bare handler, no example app around them)
#                      (batch-http: GET /batch/evm, one batch-settlement
#                      channel per connection opened by a deposit before the
#                      clock, then a voucher per call, checked in process;
#                      compare it with paid-http, the exact path through the
#                      same HTTP facilitator)
#   SKIP_PEER=1        do not build or run the x402-rs peer (bench/peer-x402rs)
#   PERF=0             do not profile the paid path with perf (default: profile if perf works)
#   PERF_SECONDS=5     length of the perf capture
#   SERVER_CPUS / LOADGEN_CPUS   e.g. "0" and "1": pin with taskset
#   OUT=bench/results/<timestamp>  where logs and results go
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DURATION="${DURATION:-10}"
ROUNDS="${ROUNDS:-3}"
MEM_DURATION="${MEM_DURATION:-60}"
MEM_RATE="${MEM_RATE:-500}"
MEM_EVERY="${MEM_EVERY:-5}"
MEM_VALID_FOR="${MEM_VALID_FOR:-60}"
PATHS=" ${PATHS:-baseline floor challenge paid-memory paid-redis http-floor paid-http paid-http-noprecheck paid-http-newpayers batch-http http-peer session-floor session-redis memory} "
want() { [[ "$PATHS" == *" $1 "* ]]; }
CONNECTIONS="${CONNECTIONS:-32}"
PAID_MAX="${PAID_MAX:-60000}"
SLICES="${SLICES:-4}"
SLICE_SECONDS="$(awk -v d="$DURATION" -v n="$SLICES" 'BEGIN { printf "%.3f", d / n }')"
SLICE_MAX=$(( PAID_MAX / SLICES ))
SESSIONS="${SESSIONS:-4000}"
PAYERS="${PAYERS:-64}"
SEED="${SEED:-$RANDOM}"
PERF_SECONDS="${PERF_SECONDS:-5}"
OUT="${OUT:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
export LOADGEN_THREADS="${LOADGEN_THREADS:-1}"

# Everything this script starts is recorded here and stopped on exit.
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] || continue
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    sleep 0.3
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] || continue
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Command prefixes that pin the server / the generator (arrays, so that the
# recorded $! is the process itself, not a subshell).
PIN_SERVER=()
PIN_LOADGEN=()
if command -v taskset >/dev/null; then
    [ -n "${SERVER_CPUS:-}" ] && PIN_SERVER=(taskset -c "$SERVER_CPUS")
    [ -n "${LOADGEN_CPUS:-}" ] && PIN_LOADGEN=(taskset -c "$LOADGEN_CPUS")
fi

log "building (release)"
cargo build --release -p x402-loadgen --bins 2>&1 | tail -n 3 >&2
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps 2>/dev/null \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
BIN="${TARGET_DIR:-$ROOT/target}/release"
for b in bench-server loadgen bench-report fake-facilitator; do
    [ -x "$BIN/$b" ] || { echo "missing $BIN/$b" >&2; exit 1; }
done

# The peer: x402-rs's axum middleware (bench/peer-x402rs, its own lock file
# and target folder). If it cannot be built, its row is left out.
PEER=""
if [ "${SKIP_PEER:-0}" != 1 ] && want http-peer; then
    log "building the x402-rs peer (bench/peer-x402rs, release)"
    PEER_TARGET="${TARGET_DIR:-$ROOT/target}/peer"
    if CARGO_TARGET_DIR="$PEER_TARGET" cargo build --release --locked \
        --manifest-path "$ROOT/bench/peer-x402rs/Cargo.toml" > "$OUT/peer-build.log" 2>&1; then
        PEER="$PEER_TARGET/release/x402rs-peer"
    else
        log "the x402-rs peer did not build (see $OUT/peer-build.log): its row is skipped"
    fi
fi

# --- Redis -----------------------------------------------------------------
tcp_open() { # tcp_open HOST PORT
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}
redis_ping() { # redis_ping HOST PORT: true when it answers +PONG
    local reply
    reply="$(exec 3<>"/dev/tcp/$1/$2" && printf 'PING\r\n' >&3 && timeout 2 head -c 5 <&3)" 2>/dev/null || return 1
    [ "$reply" = "+PONG" ]
}
free_port() {
    local p
    for _ in $(seq 1 200); do
        p=$(( (RANDOM % 20000) + 30000 ))
        if ! tcp_open 127.0.0.1 "$p"; then echo "$p"; return 0; fi
    done
    return 1
}

REDIS_OK=0
if [ "${SKIP_REDIS:-0}" != 1 ]; then
    REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
    hostport="${REDIS_URL#redis://}"; hostport="${hostport##*@}"; hostport="${hostport%%/*}"
    rhost="${hostport%%:*}"; rport="${hostport##*:}"; [ "$rport" = "$hostport" ] && rport=6379
    if redis_ping "$rhost" "$rport"; then
        log "using the Redis at $REDIS_URL"
        REDIS_OK=1
    elif command -v redis-server >/dev/null; then
        rport="$(free_port)"
        log "no Redis at $REDIS_URL: starting redis-server on 127.0.0.1:$rport"
        redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no \
            --protected-mode yes > "$OUT/redis.log" 2>&1 &
        PIDS+=("$!")
        for _ in $(seq 1 50); do redis_ping 127.0.0.1 "$rport" && break; sleep 0.1; done
        if redis_ping 127.0.0.1 "$rport"; then
            REDIS_URL="redis://127.0.0.1:$rport"
            REDIS_OK=1
        else
            log "redis-server did not answer; skipping the Redis paths"
        fi
    else
        log "no Redis and no redis-server binary: skipping the Redis paths (apt-get install redis-server)"
    fi
fi

# --- The fake facilitator -----------------------------------------------------
# One for the whole run, on loopback: it accepts every payment and counts
# the calls (bench/loadgen/src/bin/fake-facilitator.rs).
FACILITATOR=""
if want http-floor || want paid-http || want paid-http-noprecheck || want paid-http-newpayers || want paid-http-engine || want batch-http || want http-peer; then
    "${PIN_SERVER[@]}" env HOST=127.0.0.1 PORT=0 "$BIN/fake-facilitator" \
        > "$OUT/fake-facilitator.out" 2> "$OUT/fake-facilitator.log" &
    PIDS+=("$!")
    for _ in $(seq 1 100); do
        FACILITATOR="$(sed -n 's|^listening on http://||p;T;q' "$OUT/fake-facilitator.out" 2>/dev/null || true)"
        [ -n "$FACILITATOR" ] && break
        sleep 0.1
    done
    [ -n "$FACILITATOR" ] || { log "the fake facilitator did not start"; exit 1; }
    log "fake facilitator on http://$FACILITATOR"
fi

# --- Servers and runs ---------------------------------------------------------
SERVER_PID=""
start_server() { # start_server NAME MODE [ENV=VAL...]
    local name="$1" mode="$2"; shift 2
    local logf="$OUT/server-$name-r$ROUND.log"
    "${PIN_SERVER[@]}" env -u REDIS_URL -u FACILITATOR_URL -u EVM_RPC_URL \
        -u WEBHOOK_URL -u WEBHOOK_SECRET -u DEV_FUND HOST=127.0.0.1 PORT=0 BENCH_PAYERS="$PAYERS" BENCH_SEED="$SEED" "$@" \
        "$BIN/bench-server" "$mode" > "$logf" 2>&1 &
    await_listening "$name" "$!" "$logf"
}
start_peer() { # start_peer: the x402-rs peer against the fake facilitator
    local logf="$OUT/server-http-peer-r$ROUND.log"
    "${PIN_SERVER[@]}" env PORT=0 FACILITATOR_URL="http://$FACILITATOR" "$PEER" > "$logf" 2>&1 &
    await_listening http-peer "$!" "$logf"
}
await_listening() { # await_listening NAME PID LOG: sets SERVER_PID and ADDR
    SERVER_PID="$2"
    PIDS+=("$SERVER_PID")
    ADDR=""
    for _ in $(seq 1 100); do
        # The log may not exist yet: the server's shell opens it after the
        # fork, which can lose the race with this first read.
        ADDR="$(sed -n 's|^listening on http://||p;T;q' "$3" 2>/dev/null || true)"
        [ -n "$ADDR" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$3" >&2; exit 1; }
        sleep 0.1
    done
    [ -n "$ADDR" ] || { log "server $1 did not start"; cat "$3" >&2; exit 1; }
}
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
}

# run_load LABEL LOADGEN-ARGS...: loadgen against $ADDR/$SERVER_PID, bounded
# by `timeout` as well as by its own duration and count.
run_load() {
    local label="$1"; shift
    local limit=$(( ${DURATION%.*} + ${MEM_DURATION%.*} + 300 ))
    local file="$label-r$ROUND${SLICE:+-s$SLICE}"
    "${PIN_LOADGEN[@]}" timeout "$limit" "$BIN/loadgen" --addr "$ADDR" --label "$label" \
        --connections "$CONNECTIONS" --payers "$PAYERS" --seed "$SEED" \
        --server-pid "$SERVER_PID" "$@" > "$OUT/$file.json" 2> "$OUT/$file.err" &
    local lg="$!"
    PIDS+=("$lg")
    if [ "${PROFILE_THIS:-0}" = 1 ]; then
        # Profile the server once the timed phase has started.
        for _ in $(seq 1 600); do grep -q running "$OUT/$file.err" 2>/dev/null && break; sleep 0.1; done
        sleep 1
        perf record -e cpu-clock -F 999 -g -p "$SERVER_PID" -o "$OUT/perf-$label.data" -- sleep "$PERF_SECONDS" \
            > "$OUT/perf-$label.log" 2>&1 || log "perf record failed (see $OUT/perf-$label.log)"
    fi
    if ! wait "$lg"; then
        log "loadgen $label failed:"; cat "$OUT/$file.err" >&2; return 1
    fi
    sed "s/^/[round $ROUND${SLICE:+, slice $SLICE}] /" "$OUT/$file.err" >&2
    # Each result line records its round (and slice).
    sed "s/^{/{\"round\":$ROUND,${SLICE:+\"slice\":$SLICE,}/" "$OUT/$file.json" >> "$RESULTS"
}

# --- Paths side by side --------------------------------------------------------
# This machine's speed drifts from one second to the next (one server,
# unchanged, went from 76 to 55 us of CPU per request over three
# consecutive 2 s slices, with no steal time reported), and a fresh
# process's memory layout moves it too. So the paths a target compares are
# not run one after another for DURATION seconds each: within a round their
# servers are started together and loaded in short alternating slices, so
# that every path sees the same stretch of the machine's weather. Each
# slice is one result line (with its "slice"); bench-report sums a round's
# slices of a path into one figure.

# start_path PATH: starts PATH's server (ADDR, SERVER_PID); false if it
# cannot run here.
start_path() {
    case "$1" in
        baseline)
            log "round $ROUND/$ROUNDS, baseline: the same handler body, no paywall layer"
            start_server baseline baseline ;;
        floor)
            log "round $ROUND/$ROUNDS, 402 floor: paid-api's 402 bytes from a bare handler, no engine"
            start_server challenge-floor challenge-floor ;;
        challenge)
            log "round $ROUND/$ROUNDS, 402 challenge path (paid-api, no payment header)"
            start_server challenge paid-api ;;
        http-floor)
            log "round $ROUND/$ROUNDS, facilitator floor: the two HTTP facilitator calls from a bare handler, no engine"
            start_server http-floor paid-http-floor FACILITATOR_URL="http://$FACILITATOR" ;;
        paid-http)
            log "round $ROUND/$ROUNDS, paid exact path through the HTTP facilitator (paid-api, in-memory claims)"
            start_server paid-http paid-api FACILITATOR_URL="http://$FACILITATOR" ;;
        paid-http-noprecheck)
            log "round $ROUND/$ROUNDS, the same with the engine's local pre-check off (what the check costs)"
            start_server paid-http-noprecheck paid-api FACILITATOR_URL="http://$FACILITATOR" \
                BENCH_LOCAL_PRECHECK=0 ;;
        paid-http-newpayers)
            log "round $ROUND/$ROUNDS, the same with every payment's signer recovered (every payer new)"
            start_server paid-http-newpayers paid-api FACILITATOR_URL="http://$FACILITATOR" \
                BENCH_KNOWN_PAYERS=0 ;;
        paid-http-engine)
            log "round $ROUND/$ROUNDS, the engine alone (PaywallLayer, pre-check off) before the bare handler"
            start_server paid-http-engine paid-http-engine FACILITATOR_URL="http://$FACILITATOR" \
                BENCH_LOCAL_PRECHECK=0 ;;
        batch-http)
            log "round $ROUND/$ROUNDS, batch-settlement voucher path (paid-api /batch/evm, channels in memory, the same HTTP facilitator for the deposits)"
            # A public test key (anvil's account 5) as the seller's receiver
            # authorizer; no claimer during the run.
            start_server batch-http paid-api FACILITATOR_URL="http://$FACILITATOR" \
                BATCH_RECEIVER_AUTHORIZER_KEY=0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba \
                BATCH_CLAIM_INTERVAL_SECS=0 ;;
        http-peer)
            [ -n "$PEER" ] || return 1
            log "round $ROUND/$ROUNDS, the peer: x402-rs's axum middleware through the same facilitator"
            start_peer ;;
        session-floor)
            log "round $ROUND/$ROUNDS, session floor: the token read and hashed, one Redis redemption per call, from a bare handler, no engine ($SESSIONS sessions opened first)"
            start_server session-floor session-floor REDIS_URL="$REDIS_URL" BENCH_SESSIONS="$SESSIONS" ;;
        session-redis)
            log "round $ROUND/$ROUNDS, session redemption on Redis (paid-api; each slice buys $(( SESSIONS / SLICES )) sessions first)"
            start_server session-redis paid-api REDIS_URL="$REDIS_URL" ;;
        *) return 1 ;;
    esac
}

# side_by_side PATH...: the wanted PATHs' servers started, SLICES slices
# each (in alternating order), the servers stopped.
side_by_side() {
    local p s paths=() order=() args=() label expect i
    local -A addr=() pid=()
    for p in "$@"; do
        want "$p" || continue
        start_path "$p" || continue
        addr[$p]="$ADDR"
        pid[$p]="$SERVER_PID"
        paths+=("$p")
    done
    [ "${#paths[@]}" -gt 0 ] || return 0
    for s in $(seq 1 "$SLICES"); do
        order=("${paths[@]}")
        if [ $(( (ROUND + s) % 2 )) = 1 ]; then
            order=()
            for ((i = ${#paths[@]} - 1; i >= 0; i--)); do order+=("${paths[$i]}"); done
        fi
        for p in "${order[@]}"; do
            ADDR="${addr[$p]}" SERVER_PID="${pid[$p]}"
            label="$p" expect=200
            case "$p" in
                baseline) args=(--mode plain --path /exact/evm/eip3009) ;;
                floor) label=challenge-floor expect=402 args=(--mode plain --path /exact/evm/eip3009) ;;
                challenge) label=challenge-402 expect=402 args=(--mode plain --path /exact/evm/eip3009) ;;
                batch-http) args=(--mode batch --path /batch/evm --max-requests "$SLICE_MAX") ;;
                # The floor's sessions, a share of them per slice (a
                # session's calls are redeemed in order, and the listing
                # gives every session its calls at opening).
                session-floor) args=(--mode session --path /session/demo --tokens-from /__bench/sessions
                    --tokens-skip $(( (s - 1) * (SESSIONS / SLICES) )) --tokens-take $(( SESSIONS / SLICES ))) ;;
                session-redis) args=(--mode session --path /session/demo --sessions $(( SESSIONS / SLICES ))) ;;
                *) args=(--mode paid --path /exact/evm/eip3009 --max-requests "$SLICE_MAX") ;;
            esac
            SLICE="$s" run_load "$label" "${args[@]}" --duration "$SLICE_SECONDS" --expect "$expect"
        done
    done
    for p in "${paths[@]}"; do
        SERVER_PID="${pid[$p]}"
        stop_server
    done
}

PERF_OK=0
if [ "${PERF:-1}" != 0 ] && command -v perf >/dev/null && perf record -e cpu-clock -o /dev/null -- true >/dev/null 2>&1; then
    PERF_OK=1
fi

log "seed $SEED, $PAYERS payers, $CONNECTIONS connections, ${DURATION}s per path; results in $OUT"

# The throughput paths, ROUNDS times over, each round with its own baseline:
# the paths compared with each other run side by side within a round, and
# the median over the rounds is robust to a noisy neighbour on a shared
# machine.
for ROUND in $(seq 1 "$ROUNDS"); do
    PROFILE_ROUND=0
    [ "$ROUND" = 1 ] && PROFILE_ROUND="$PERF_OK"
    # The baseline and the 402 paths, side by side (see side_by_side).
    side_by_side baseline floor challenge

    if want paid-memory; then
        log "round $ROUND/$ROUNDS, paid exact path: in-process facilitator, dev ledger, in-memory claims"
        start_server paid-memory paid-api
        PROFILE_THIS="$PROFILE_ROUND" run_load paid-memory --mode paid --path /exact/evm/eip3009 \
            --duration "$DURATION" --max-requests "$PAID_MAX" --expect 200
        stop_server
    fi

    if [ "$REDIS_OK" = 1 ]; then
        if want paid-redis; then
            log "round $ROUND/$ROUNDS, paid exact path with Redis claims ($REDIS_URL)"
            start_server paid-redis paid-api REDIS_URL="$REDIS_URL"
            run_load paid-redis --mode paid --path /exact/evm/eip3009 \
                --duration "$DURATION" --max-requests "$PAID_MAX" --expect 200
            stop_server
        fi

    fi

    # The facilitator paths, side by side: every wanted path's server is
    # started, then each is loaded in turn for SLICES slices of
    # DURATION/SLICES seconds, in alternating order, and all are stopped.
    # The example, the floor and the peer make their two calls to the same
    # fake facilitator.
    if [ -n "$FACILITATOR" ]; then
        side_by_side http-floor paid-http paid-http-noprecheck paid-http-newpayers \
            paid-http-engine batch-http http-peer
    fi

    # The session paths, side by side in the same way.
    if [ "$REDIS_OK" = 1 ]; then
        side_by_side session-floor session-redis
    elif want session-floor || want session-redis; then
        log "round $ROUND/$ROUNDS, the session paths skipped (no Redis)"
    fi
done
ROUND=1

if [ "${SKIP_MEMORY:-0}" != 1 ] && want memory; then
    log "memory: paid path, in-memory claims, ${MEM_DURATION}s at ${MEM_RATE} req/s, payments valid ${MEM_VALID_FOR}s, RSS every ${MEM_EVERY}s"
    start_server memory paid-api
    run_load memory-paid --mode paid --path /exact/evm/eip3009 --duration "$MEM_DURATION" \
        --rate "$MEM_RATE" --valid-for "$MEM_VALID_FOR" --sample-every "$MEM_EVERY" --expect 200
    stop_server
fi

echo
echo "== x402 load harness: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), ${DURATION}s per path, $ROUNDS rounds, $CONNECTIONS connections, loadgen threads $LOADGEN_THREADS"
"$BIN/bench-report" "$RESULTS"

if [ "$PERF_OK" = 1 ] && [ -f "$OUT/perf-paid-memory.data" ]; then
    # Self time by symbol, as "PCT SYMBOL" lines (the whole report first, so
    # that no pipe is cut short).
    perf report -i "$OUT/perf-paid-memory.data" --no-children -g none --sort symbol --stdio \
        > "$OUT/perf-report.txt" 2>/dev/null || true
    sed -n 's/^ *\([0-9.]*%\) *\[[^]]*\] \(.*[^ -]\)[ -]*$/\1 \2/p' "$OUT/perf-report.txt" \
        > "$OUT/perf-all.txt" || true
    echo
    echo "Profile of the paid path (server process, ${PERF_SECONDS}s of perf cpu-clock samples, self time by symbol):"
    sed -n '1,20p' "$OUT/perf-all.txt" | sed 's/^/  /'
    awk '
        { pct = $1; sub(/%/, "", pct) }
        /k256|ecdsa|elliptic_curve|primeorder|crypto_bigint|secp256k1|subtle::/ { ec += pct }
        /keccak/ { kk += pct }
        END { printf "  => secp256k1 arithmetic (k256/ecdsa/elliptic_curve/subtle): %.1f%% of server samples; keccak: %.1f%%\n", ec, kk }
    ' "$OUT/perf-all.txt"
fi
echo "(raw results: $RESULTS; logs in $OUT)"
