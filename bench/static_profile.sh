#!/bin/sh
# Where a static request's cost goes, per server: syscalls per request
# (strace -c -f over a short wrk run, divided by the requests wrk counted),
# context switches per request (voluntary + involuntary, summed over the
# server's threads from /proc/PID/task/*/status) and server CPU per request
# (utime + stime from /proc/PID/stat, in microseconds), both over a second
# run without strace. Each engine serves DIR through examples/greetings
# --static; nginx the same files (sendfile on, 2 workers, no
# open_file_cache), as bench/static_measure.sh runs them.
# Bounded: wrk -t1 -c10 for SECONDS (default 3) per run, every server
# killed by its PID, the temp dir removed.
# Usage: bench/static_profile.sh [BUILD_DIR] [SECONDS] [FILE_BYTES]
set -eu
. "$(dirname "$0")/static_lib.sh"
build=${1:-build}
secs=${2:-3}
bytes=${3:-4096}
port=18299
for t in wrk strace; do
    command -v $t >/dev/null 2>&1 || { echo "static_profile: $t not installed, skipped"; exit 0; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
head -c "$bytes" /dev/urandom > "$dir/f.bin"
chmod 644 "$dir/f.bin"
touch -d '1 hour ago' "$dir/f.bin" # settled, as deployed assets are
url="http://127.0.0.1:$port/static/f.bin"


reqs() { # wrk's output on stdin: the requests it completed
    awk '/requests in/ {print $1}'
}

cpu() { # user + system clock ticks of the processes given
    for p in "$@"; do cat /proc/$p/stat 2>/dev/null; done |
        awk '{sub(/^.*\) /, ""); n += $12 + $13} END {print n + 0}'
}

csw() { # total context switches of the processes given
    for p in "$@"; do cat /proc/$p/task/*/status 2>/dev/null; done |
        awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n + 0}'
}

# profile NAME PID...: one run for context switches, one under strace.
profile() {
    name=$1
    shift
    c0=$(csw "$@")
    t0=$(cpu "$@")
    n=$(timeout $((secs + 20)) wrk -t1 -c10 -d"${secs}s" "$url" | reqs)
    c1=$(csw "$@")
    t1=$(cpu "$@")
    args=""
    for p in "$@"; do args="$args -p $p"; done
    # shellcheck disable=SC2086
    strace -c -f -o "$dir/strace.$name" $args 2>/dev/null &
    spid=$!
    sleep 0.5
    m=$(timeout $((secs + 20)) wrk -t1 -c10 -d"${secs}s" "$url" | reqs)
    kill -INT $spid 2>/dev/null || true
    wait $spid 2>/dev/null || true
    total=$(awk 'NR > 2 && $NF != "total" && $1 !~ /^-/ {n += $4} END {print n + 0}' "$dir/strace.$name")
    hz=$(getconf CLK_TCK)
    printf '%-11s cpu/req %6.1f us  csw/req %6.2f  syscalls/req %6.2f  (%s and %s requests)\n' \
        "$name" "$(echo "$t1 $t0 $n $hz" | awk '{print ($1 - $2) * 1e6 / $4 / ($3 ? $3 : 1)}')" \
        "$(echo "$c1 $c0 $n" | awk '{print ($1 - $2) / ($3 ? $3 : 1)}')" \
        "$(echo "$total $m" | awk '{print $1 / ($2 ? $2 : 1)}')" "$n" "$m"
    awk -v m="$m" 'NR > 2 && $NF != "total" && $1 !~ /^-/ {
        printf "    %-16s %6.2f/req\n", $NF, $4 / (m ? m : 1)
    }' "$dir/strace.$name" | sort -k2 -rn | head -10
}

for e in $(cat "$build/srv_engines.txt"); do
    "$build/examples/greetings/greetings" --engine "$e" --port $port --static "$dir" \
        >"$dir/greetings.log" 2>&1 &
    pid=$!
    if static_wait "$url" static_profile; then
        profile "$e" $pid
    fi
    kill $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
done

if static_nginx_start "$dir" $port; then
    if static_wait "$url" static_profile; then
        master=$(cat "$dir/nginx.pid")
        workers=$(pgrep -P "$master" | tr '\n' ' ')
        # shellcheck disable=SC2086
        profile nginx $workers
    fi
    static_nginx_stop "$dir"
fi
