#!/bin/sh
# A rolling restart of three Greetings instances behind a real nginx, under
# constant load from bench/srv-load: each instance in turn gets SIGTERM
# (it drains: --drain-ms keeps it serving while /ready says 503, then its
# graceful stop), is started again on its port, and is ready before the
# next one goes. Prints "requests: N ok, N failed"; zero failed is the
# requirement (exit 1 otherwise).
#   examples/deploy/rolling-restart.sh [--engine NAME] [--build-dir DIR]
#                                      [--seconds N]
# It builds what it needs (like make bench). Needs nginx: scripts/install-deps.sh --peers.
# Loopback only; stops everything it started.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
engine=threadpool
build=build
seconds=20
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine=${2:?--engine needs a name}; shift 2 ;;
        --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
        --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "rolling-restart: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$build" in /*) ;; *) build="$root/$build" ;; esac
command -v nginx >/dev/null || { echo "rolling-restart: nginx is missing: run scripts/install-deps.sh --peers" >&2; exit 2; }
[ -f "$build/build.ninja" ] || meson setup "$build" "$root" >/dev/null
ninja -C "$build" examples/greetings/greetings bench/srv-load >/dev/null
greetings="$build/examples/greetings/greetings"
load="$build/bench/srv-load"

tmp=$(mktemp -d /tmp/srv-rolling-XXXXXX)
pids=""
nginx_pid=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    # nginx's master stops its workers on SIGTERM (after SIGKILL they would
    # live on, orphaned, holding the port and our stdout).
    if [ -n "$nginx_pid" ]; then
        kill -TERM "$nginx_pid" 2>/dev/null || true
        wait "$nginx_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_ready() { # port
    i=0
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/ready")" = 200 ]; do
        i=$((i + 1)); [ $i -gt 100 ] && { echo "rolling-restart: 127.0.0.1:$1 not ready after 10 s" >&2; exit 1; }
        sleep 0.1
    done
}
start_instance() { # index port
    # A 20 ms handler keeps requests in flight; 1.5 s of drain.
    "$greetings" --engine "$engine" --host 127.0.0.1 --port "$2" --sleep-ms 20 \
        --drain-ms 1500 --trusted-proxies 127.0.0.1 >>"$tmp/g$1.log" 2>&1 &
    eval "pid$1=$!"
    wait_ready "$2"
}

p1=$(free_port); p2=$(free_port); p3=$(free_port); pn=$(free_port)
start_instance 1 "$p1"; start_instance 2 "$p2"; start_instance 3 "$p3"
pids="$pid1 $pid2 $pid3"
mkdir -p "$tmp/client_body" "$tmp/proxy" "$tmp/fastcgi" "$tmp/uwsgi" "$tmp/scgi"
sed -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$pn|" -e "s|@PORT1@|$p1|" -e "s|@PORT2@|$p2|" \
    -e "s|@PORT3@|$p3|" "$root/examples/deploy/nginx.conf.in" >"$tmp/nginx.conf"
nginx -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" &
nginx_pid=$!
i=0
until curl -sf -o /dev/null "http://127.0.0.1:$pn/health"; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "rolling-restart: nginx did not start: $(cat "$tmp/error.log")" >&2; exit 1; }
    sleep 0.1
done
echo "rolling-restart: engine $engine, nginx :$pn -> greetings :$p1 :$p2 :$p3, $seconds s of load (c=32)"

"$load" --duration "$seconds" -c 32 -t 10 --json \
    "http://127.0.0.1:$pn/greetings?name=Rolling" >"$tmp/load.json" &
load_pid=$!
sleep 2
n=1
for port in $p1 $p2 $p3; do
    eval "old=\$pid$n"
    t0=$(date +%s.%N)
    kill -TERM "$old"
    wait "$old" || { echo "rolling-restart: instance $n did not exit 0 after SIGTERM" >&2; exit 1; }
    start_instance "$n" "$port"
    eval "new=\$pid$n"
    pids="$pids $new"
    echo "rolling-restart: instance $n restarted (drain, stop, start, ready in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s)"
    n=$((n + 1))
    sleep 1
done
wait "$load_pid"
result=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
ok = sum(v for k, v in r.get("status_codes", {}).items() if k.startswith("2"))
print(ok, r["requests"] - ok, round(r["requests_per_sec"]))
' "$tmp/load.json")
set -- $result
echo "requests: $1 ok, $2 failed ($3 req/s through nginx)"
if [ "$2" != 0 ]; then
    echo "rolling-restart: failures; srv-load said:" >&2
    cat "$tmp/load.json" >&2
    exit 1
fi
