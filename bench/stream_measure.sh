#!/bin/sh
# Streamed download, per engine: examples/stream serves GET /download?bytes=N
# (1 GiB by default) to one curl on 127.0.0.1; prints the throughput, the
# server's idle RSS and its peak RSS (VmHWM) during the download. With nginx
# installed, the same bytes as a static file from nginx as the reference.
# Usage: bench/stream_measure.sh [BUILD_DIR] [BYTES] [STREAM_BUFFER_BYTES]
set -eu
build=${1:-build}
bytes=${2:-1073741824}
buffer=${3:-65536}
port=18299
printf '%-12s %12s %14s %14s\n' server 'MB/s' 'idle RSS KiB' 'peak RSS KiB'
rss() { awk -v k="$2" '$1 == k ":" {print $2}' "/proc/$1/status"; }
for e in $("$build/examples/stream/stream" --help >/dev/null 2>&1 && cat "$build/srv_engines.txt"); do
    "$build/examples/stream/stream" --engine "$e" --port $port --buffer "$buffer" >/dev/null 2>&1 &
    pid=$!
    sleep 0.5
    idle=$(rss $pid VmRSS)
    speed=$(curl -s -o /dev/null -w '%{speed_download}' "http://127.0.0.1:$port/download?bytes=$bytes")
    peak=$(rss $pid VmHWM)
    kill $pid
    wait $pid 2>/dev/null || true
    printf '%-12s %12.0f %14s %14s\n' "$e" "$(echo "$speed / 1000000" | bc -l)" "$idle" "$peak"
done
if command -v nginx >/dev/null 2>&1; then
    dir=$(mktemp -d)
    chmod 755 "$dir" # nginx's workers run as an unprivileged user
    head -c "$bytes" /dev/zero > "$dir/file"
    chmod 644 "$dir/file"
    cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
error_log $dir/error.log;
pid $dir/nginx.pid;
events {}
http {
    access_log off;
    sendfile on;
    server { listen 127.0.0.1:$port; root $dir; }
}
CONF
    nginx -c "$dir/nginx.conf" -p "$dir"
    sleep 0.5
    speed=$(curl -s -o /dev/null -w '%{speed_download}' "http://127.0.0.1:$port/file")
    nginx -c "$dir/nginx.conf" -p "$dir" -s stop
    printf '%-12s %12.0f %14s %14s\n' nginx-file "$(echo "$speed / 1000000" | bc -l)" - -
    rm -rf "$dir"
fi
