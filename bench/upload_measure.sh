#!/bin/sh
# Streamed upload, per engine: examples/stream takes PUT /upload (1 GiB of
# zeros by default, chunked from a pipe, from one curl on 127.0.0.1) into
# its SHA-256; prints the throughput, the server's idle RSS and its peak RSS
# (VmHWM) during the upload, and whether the digest it answered is right;
# over HTTP/1.1 and, on an engine that speaks it, HTTP/2 (h2c prior knowledge).
# An engine without SRV_CAP_STREAM_BODY has no /upload route (the example
# says so at start): listed as such, never measured buffering a body.
# Usage: bench/upload_measure.sh [BUILD_DIR] [BYTES]
set -eu
build=${1:-build}
bytes=${2:-1073741824}
port=18298
want="$bytes $(head -c "$bytes" /dev/zero | sha256sum | cut -d' ' -f1)"
printf '%-12s %12s %14s %14s  %s\n' server 'MB/s' 'idle RSS KiB' 'peak RSS KiB' digest
rss() { awk -v k="$2" '$1 == k ":" {print $2}' "/proc/$1/status"; }
out=$(mktemp)
log=$(mktemp)
# One run: a fresh server (its own VmHWM), one upload over $2 (http1.1 or h2c).
measure() {
    e=$1
    proto=$2
    "$build/examples/stream/stream" --engine "$e" --port $port >"$log" 2>&1 &
    pid=$!
    sleep 0.5
    idle=$(rss $pid VmRSS)
    if grep -q 'no PUT /upload' "$log"; then
        kill $pid
        wait $pid 2>/dev/null || true
        printf '%-12s %12s %14s %14s  %s\n' "$e" - "$idle" - 'no streamed bodies (SRV_CAP_STREAM_BODY)'
        return 1
    fi
    if [ "$proto" = h2c ]; then
        # HTTP/2 prior knowledge, where the engine speaks it (h2o).
        v=$(curl -s --http2-prior-knowledge -o /dev/null -w '%{http_version}' \
            "http://127.0.0.1:$port/events?count=1&interval_ms=1" || true)
        if [ "$v" != 2 ]; then
            kill $pid
            wait $pid 2>/dev/null || true
            return 1
        fi
        flag=--http2-prior-knowledge
    else
        flag=--http1.1
    fi
    speed=$(head -c "$bytes" /dev/zero |
        curl -s $flag -T - -o "$out" -w '%{http_code} %{speed_upload}' "http://127.0.0.1:$port/upload")
    peak=$(rss $pid VmHWM)
    kill $pid
    wait $pid 2>/dev/null || true
    code=${speed%% *}
    got=$(cat "$out")
    ok=wrong
    [ "$got" = "$want" ] && ok=ok
    label=$e
    [ "$proto" = h2c ] && label="$e (h2c)"
    printf '%-12s %12.0f %14s %14s  %s\n' "$label" "$(echo "${speed#* } / 1000000" | bc -l)" \
        "$idle" "$peak" "$ok (HTTP $code)"
}
for e in $("$build/examples/stream/stream" --help >/dev/null 2>&1 && cat "$build/srv_engines.txt"); do
    measure "$e" http1.1 && measure "$e" h2c || true
done
rm -f "$out" "$log"
