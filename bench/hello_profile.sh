#!/bin/sh
# Where a hello request's CPU goes, per server, beside the libraries the
# engines wrap (make bench's hello scenario, one server at a time): the
# server's CPU per request (utime + stime of its processes, /proc/PID/stat,
# over a wrk run), its system calls per request (strace -c -f over a second
# run) and the shares of its CPU samples by where they fell (perf record -e
# cpu-clock over a third run: the kernel, libc, libsrv and the example, the
# engine's library, nginx or h2o itself), turned into microseconds per
# request with the first run's figure.
#   bench/hello_profile.sh [BUILD_DIR] [SECONDS] [SERVERS]
# SERVERS (default all): threadpool mhd h2o uv nginx mhd-bare h2o-standalone
# (engines inline: every route non-blocking, as the hello rows' `inline`).
# Bounded: wrk -t2 -c100 for SECONDS (default 4) per run; every server is
# stopped by its PID; the temp dir is removed. Loopback only.
set -eu
build=${1:-build}
secs=${2:-4}
servers=${3:-"threadpool mhd h2o uv nginx mhd-bare h2o-standalone"}
for t in wrk strace perf; do
    command -v $t >/dev/null 2>&1 || { echo "hello_profile: $t not installed, skipped"; exit 0; }
done
. "$(dirname "$0")/listening.sh"
dir=$(mktemp -d)
chmod 755 "$dir"
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$dir"' EXIT
greetings=$build/examples/greetings/greetings

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

tree() { # the pids of process $1 and its children
    echo "$1"
    pgrep -P "$1" || true
}

cpu() { # user + system clock ticks of the processes given
    for p in "$@"; do cat /proc/$p/stat 2>/dev/null; done |
        awk '{sub(/^.*\) /, ""); n += $12 + $13} END {print n + 0}'
}

reqs() { awk '/requests in/ {print $1}'; }

start() { # name -> pid, port
    name=$1
    port=$(free_port)
    case $name in
    nginx)
        mkdir -p "$dir/nginx"
        cat > "$dir/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 10000; }
http {
    access_log off;
    keepalive_requests 100000000;
    default_type "text/plain; charset=utf-8";
    client_body_temp_path $dir/nginx;
    proxy_temp_path $dir/nginx;
    fastcgi_temp_path $dir/nginx;
    uwsgi_temp_path $dir/nginx;
    scgi_temp_path $dir/nginx;
    server {
        listen 127.0.0.1:$port backlog=4096;
        location = /greetings { return 200 "Hello Bench!"; }
    }
}
EOF
        nginx -p "$dir/nginx/" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" \
            >"$dir/$name.log" 2>&1 &
        ;;
    mhd-bare)
        "$build/bench/mhd_bare" --port "$port" >"$dir/$name.log" 2>&1 &
        ;;
    h2o-standalone)
        mkdir -p "$dir/h2o"
        printf 'Hello Bench!' > "$dir/h2o/hello.txt"
        chmod 644 "$dir/h2o/hello.txt"
        chmod 755 "$dir/h2o"
        cat > "$dir/h2o/h2o.conf" <<EOF
listen:
  host: 127.0.0.1
  port: $port
num-threads: 2
max-connections: 10000
file.etag: OFF
file.mime.settypes:
  "text/plain; charset=utf-8": .txt
hosts:
  default:
    paths:
      /greetings:
        file.file: "$dir/h2o/hello.txt"
EOF
        h2o -c "$dir/h2o/h2o.conf" >"$dir/$name.log" 2>&1 &
        ;;
    *)
        "$greetings" --engine "$name" --host 127.0.0.1 --port "$port" --sleep-ms 0 \
            --handlers inline >"$dir/$name.log" 2>&1 &
        ;;
    esac
    pid=$!
    pids="$pids $pid"
    i=0
    until curl -s -o /dev/null "http://127.0.0.1:$port/greetings?name=Bench"; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "hello_profile: $name did not start:"; cat "$dir/$name.log"; exit 1; }
        sleep 0.1
    done
}

hz=$(getconf CLK_TCK)
printf '%-15s %9s %8s %8s | %s\n' server req/s us/req sys/req "us/req by where (perf cpu-clock shares)"
for s in $servers; do
    start "$s"
    url="http://127.0.0.1:$port/greetings?name=Bench"
    wrk -t2 -c100 -d1s "$url" >/dev/null 2>&1 # warm-up
    procs=$(tree $pid)
    # shellcheck disable=SC2086
    t0=$(cpu $procs)
    n=$(wrk -t2 -c100 -d"${secs}s" "$url" | reqs)
    # shellcheck disable=SC2086
    t1=$(cpu $procs)
    us=$(echo "$t0 $t1 $n $hz" | awk '{printf "%.2f", ($2 - $1) / $4 * 1e6 / $3}')
    args=""
    for p in $procs; do args="$args -p $p"; done
    # shellcheck disable=SC2086
    strace -c -f -o "$dir/strace.$s" $args 2>/dev/null &
    spid=$!
    sleep 0.5
    m=$(wrk -t2 -c100 -d"${secs}s" "$url" | reqs)
    kill -INT $spid
    wait $spid 2>/dev/null || true
    sys=$(awk -v n="$m" '$NF == "total" {printf "%.2f", $4 / n}' "$dir/strace.$s")
    pidlist=$(echo $procs | tr ' ' ',')
    perf record -q -e cpu-clock -F 1999 -p "$pidlist" -o "$dir/perf.$s" -- sleep "$secs" \
        >/dev/null 2>&1 &
    ppid=$!
    wrk -t2 -c100 -d"${secs}s" "$url" >/dev/null
    wait $ppid 2>/dev/null || true
    where=$(perf report -i "$dir/perf.$s" --sort dso --stdio 2>/dev/null | awk -v us="$us" '
        /^ *[0-9.]+%/ {
            p = $1; sub(/%/, "", p); d = $2
            if (d ~ /kernel/) k = "kernel"
            else if (d ~ /^libc/) k = "libc"
            else if (d ~ /libsrv|greetings/) k = "libsrv"
            else if (d ~ /microhttpd/) k = "libmicrohttpd"
            else if (d ~ /h2o/) k = "h2o"
            else if (d ~ /uv/) k = "libuv"
            else if (d ~ /nginx/) k = "nginx"
            else if (d ~ /mhd_bare/) k = "mhd_bare"
            else k = "other"
            share[k] += p
        }
        END { for (k in share) if (share[k] >= 0.5) printf "%s %.2f (%.0f%%)  ", k, us * share[k] / 100, share[k] }')
    rps=$(echo "$n $secs" | awk '{printf "%.0f", $1 / $2}')
    printf '%-15s %9s %8s %8s | %s\n' "$s" "$rps" "$us" "$sys" "$where"
    kill $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
done
