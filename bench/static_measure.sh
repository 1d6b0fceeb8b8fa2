#!/bin/sh
# Static-file throughput, per engine, against nginx serving the same files
# in the same run: examples/greetings --static DIR (srv_static_add) and
# nginx (root DIR, sendfile on, 2 workers) each get wrk -t2 -c100 for
# SECONDS on a 4 KiB and a 1 MiB file, on 127.0.0.1. Prints requests/s,
# MB/s and the non-2xx count (must be 0). Bounded: every server is killed
# by its PID, the temp dir removed.
# Usage: bench/static_measure.sh [BUILD_DIR] [SECONDS]
set -eu
. "$(dirname "$0")/static_lib.sh"
build=${1:-build}
secs=${2:-4}
port=18298
command -v wrk >/dev/null 2>&1 || { echo "static_measure: wrk not installed, skipped"; exit 0; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir" # nginx's workers run as an unprivileged user
head -c 4096 /dev/urandom > "$dir/4k.bin"
head -c 1048576 /dev/urandom > "$dir/1m.bin"
chmod 644 "$dir"/*.bin
touch -d '1 hour ago' "$dir"/*.bin # settled, as deployed assets are (docs/API.md)


# One wrk run: "req/s MB/s non2xx".
measure() {
    out=$(timeout $((secs + 20)) wrk -t2 -c100 -d"${secs}s" "http://127.0.0.1:$port$1" 2>&1)
    rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
    tps=$(echo "$out" | awk '/^Transfer\/sec:/ {v = $2; u = substr(v, length(v) - 1);
        n = substr(v, 1, length(v) - 2) + 0;
        if (u == "GB") n *= 1024; else if (u == "KB") n /= 1024; else if (u != "MB") n /= 1048576;
        printf "%.0f", n * 1.048576}')
    bad=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    echo "${rps:-0} ${tps:-0} ${bad:-0}"
}

printf '%-12s %-8s %12s %10s %8s\n' server file 'req/s' 'MB/s' non-2xx
row() { # server file "rps mbs bad"
    set -- "$1" "$2" $3
    printf '%-12s %-8s %12.0f %10s %8s\n' "$1" "$2" "$3" "$4" "$5"
}

for e in $(cat "$build/srv_engines.txt"); do
    "$build/examples/greetings/greetings" --engine "$e" --port $port --static "$dir" \
        >"$dir/greetings.log" 2>&1 &
    pid=$!
    if static_wait "http://127.0.0.1:$port/static/4k.bin" static_measure; then
        row "$e" 4k "$(measure /static/4k.bin)"
        row "$e" 1m "$(measure /static/1m.bin)"
    fi
    kill $pid 2>/dev/null || echo "static_measure: $e exited early: $(tail -1 "$dir/greetings.log")"
    wait $pid 2>/dev/null || true
done

if static_nginx_start "$dir" $port; then
    if static_wait "http://127.0.0.1:$port/static/4k.bin" static_measure; then
        row nginx 4k "$(measure /static/4k.bin)"
        row nginx 1m "$(measure /static/1m.bin)"
    fi
    static_nginx_stop "$dir"
fi
