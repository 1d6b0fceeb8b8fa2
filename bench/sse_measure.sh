#!/bin/sh
# Many concurrent server-sent-event clients, per engine: examples/stream
# (handlers non-blocking, on the I/O thread) serves GET /events to N clients
# (10,000 by default; bench/sse_clients.py, one connection each), COUNT
# events one second apart. Prints the server's idle RSS, its RSS when every
# client holds its stream, the cost per client, and what the clients saw
# (events received, the gap between consecutive events: 1000 ms when the
# server keeps up).
# Usage: bench/sse_measure.sh [BUILD_DIR] [CLIENTS] [COUNT]
set -eu
build=${1:-build}
clients=${2:-10000}
count=${3:-10}
port=18297
here=$(dirname "$0")
# Each client is one descriptor in the client process and one in the
# server: each needs more than the usual 1024.
if ! ulimit -n $((clients + 1000)) 2>/dev/null; then
    hard=$(ulimit -Hn)
    echo "sse_measure: the open-file limit cannot reach $((clients + 1000)) (hard limit" \
         "$hard): measuring $((hard - 1000)) clients instead; raise it for $clients" >&2
    clients=$((hard - 1000))
    ulimit -n "$hard"
fi
rss() { awk -v k="$2" '$1 == k ":" {print $2}' "/proc/$1/status"; }
mark=$(mktemp)
trap 'rm -f "$mark"' EXIT
printf '%-11s %9s %9s %9s %10s  %s\n' engine 'idle KiB' 'held KiB' 'peak KiB' 'KiB/client' clients
for e in $(cat "$build/srv_engines.txt"); do
    SRV_MAX_CONNECTIONS=$((clients + 100)) "$build/examples/stream/stream" --engine "$e" \
        --host 127.0.0.1 --port $port >/dev/null 2>&1 &
    pid=$!
    sleep 0.5
    idle=$(rss $pid VmRSS)
    : > "$mark"
    python3 "$here/sse_clients.py" "$clients" $port --count "$count" --mark "$mark" \
        > "$mark.out" &
    cpid=$!
    # The RSS while every client holds its stream (sampled once all have
    # their first event), the peak over the whole run from VmHWM.
    held=-
    while kill -0 $cpid 2>/dev/null; do
        if [ "$held" = - ] && [ -s "$mark" ]; then
            held=$(rss $pid VmRSS)
        fi
        sleep 0.2
    done
    wait $cpid || true
    peak=$(rss $pid VmHWM)
    # VmHWM is updated lazily: never report a peak below a sample.
    [ "$held" != - ] && [ "$held" -gt "$peak" ] && peak=$held
    kill $pid
    wait $pid 2>/dev/null || true
    per=-
    [ "$held" != - ] && per=$(echo "scale=1; ($held - $idle) / $clients" | bc)
    printf '%-11s %9s %9s %9s %10s  %s\n' "$e" "$idle" "$held" "$peak" "$per" "$(cat "$mark.out")"
    rm -f "$mark.out"
done
