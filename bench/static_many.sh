#!/bin/sh
# The open-file cache's bound under many files (issue 34): each engine
# serves 10,000 distinct 4 KiB files (examples/greetings --static DIR)
# while wrk -t2 -c100 asks for them at random for SECONDS (default 60).
# The server's VmRSS and open descriptors are sampled every second; a row
# passes when the median RSS of the last quarter of the run is at most
# 2 MiB over the median of its second quarter (by then every file was
# asked for many times over and the allocator's per-thread arenas have
# warmed: a leak grows on, a warm-up levels off; medians, because a
# loop's buffers swing a few MB from one second to the next) and the
# descriptors stay
# within the cache's entries (at most 1024, fewer under a low
# RLIMIT_NOFILE) plus wrk's 100 connections plus 64.
# Bounded: every server killed by its PID, the temp dir removed.
# Usage: bench/static_many.sh [BUILD_DIR] [SECONDS] [FILES] [ENGINES]
set -eu
. "$(dirname "$0")/static_lib.sh"
build=${1:-build}
secs=${2:-60}
files=${3:-10000}
engines=${4:-$(cat "$build/srv_engines.txt")}
port=18297
command -v wrk >/dev/null 2>&1 || { echo "static_many: wrk not installed, skipped"; exit 0; }
[ "$secs" -ge 20 ] || { echo "static_many: SECONDS must be at least 20" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
mkdir "$dir/f"
head -c 4096 /dev/urandom > "$dir/seed"
i=0
while [ $i -lt "$files" ]; do
    cp "$dir/seed" "$dir/f/$i.bin"
    i=$((i + 1))
done
touch -d '1 hour ago' "$dir"/f/*.bin 2>/dev/null ||
    find "$dir/f" -type f -exec touch -d '1 hour ago' {} + # settled: bytes cached
cat > "$dir/random.lua" <<LUA
math.randomseed(os.time())
request = function()
    return wrk.format("GET", "/static/f/" .. math.random(0, $files - 1) .. ".bin")
end
LUA
fdmax=$((1024 + 100 + 64))

rss_kb() { awk '/^VmRSS:/ {print $2}' /proc/$1/status 2>/dev/null || echo 0; }
fds() { ls /proc/$1/fd 2>/dev/null | wc -l; }

printf '%-11s %9s %9s %9s %9s %7s %12s %8s %s\n' engine 'rss q2' 'rss q4' 'rss max' growth fds 'req/s' non-2xx verdict
for e in $engines; do
    "$build/examples/greetings/greetings" --engine "$e" --port $port --static "$dir" \
        >"$dir/greetings.log" 2>&1 &
    pid=$!
    if static_wait "http://127.0.0.1:$port/static/f/0.bin" static_many; then
        timeout $((secs + 30)) wrk -t2 -c100 -d"${secs}s" -s "$dir/random.lua" \
            "http://127.0.0.1:$port" > "$dir/wrk.out" 2>&1 &
        wpid=$!
        t=0 max=0 fdpeak=0
        : > "$dir/rss"
        while [ $t -lt "$secs" ]; do
            sleep 1
            t=$((t + 1))
            r=$(rss_kb $pid)
            echo "$t $r" >> "$dir/rss"
            [ "$r" -le "$max" ] || max=$r
            n=$(fds $pid)
            [ "$n" -le "$fdpeak" ] || fdpeak=$n
        done
        wait $wpid 2>/dev/null || true
        # median KIB of the samples with FROM < t <= TO
        median() { awk -v a="$1" -v b="$2" '$1 > a && $1 <= b {print $2}' "$dir/rss" | sort -n |
                   awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : 0}'; }
        warm=$(median $((secs / 4)) $((secs / 2)))
        end=$(median $((secs * 3 / 4)) "$secs")
        rps=$(awk '/^Requests\/sec:/ {print $2}' "$dir/wrk.out")
        bad=$(awk '/Non-2xx/ {print $NF}' "$dir/wrk.out")
        growth=$((end - warm))
        verdict=PASS
        [ $growth -le 2048 ] && [ "$fdpeak" -le $fdmax ] && [ -n "$rps" ] &&
            [ "${bad:-0}" = 0 ] || verdict=FAIL
        printf '%-11s %7d kB %7d kB %7d kB %7d kB %7d %12s %8s %s\n' "$e" "$warm" "$end" "$max" \
            "$growth" "$fdpeak" "${rps:-0}" "${bad:-0}" $verdict
    fi
    kill $pid 2>/dev/null || echo "static_many: $e exited early: $(tail -1 "$dir/greetings.log")"
    wait $pid 2>/dev/null || true
done
