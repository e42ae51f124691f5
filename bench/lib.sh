# Shared by the bench scripts that start servers (bench/callgrind-servers.sh,
# bench/interleaved.sh); sourced, not run. It sets OUT to a scratch
# directory and PIDS to an empty list, and on exit stops every process in
# PIDS and removes OUT.

OUT="$(mktemp -d)"
PIDS=()
bench_cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$OUT"
}
trap bench_cleanup EXIT

# listening LOG [PID]: the address a process printed to LOG
# ("listening on http://ADDR"), waiting up to a minute for it (a server
# under valgrind starts slowly); fails at once if PID has exited.
listening() {
    local addr
    for _ in $(seq 1 600); do
        addr="$(sed -n 's|^listening on http://||p;T;q' "$1" 2>/dev/null || true)"
        [ -n "$addr" ] && { echo "$addr"; return 0; }
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then break; fi
        sleep 0.1
    done
    return 1
}
