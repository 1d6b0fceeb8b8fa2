#!/bin/sh
# WebSocket per engine, beside embedded Tomcat's: a fresh bench/ws_echo
# (srv_route_ws, callbacks on the I/O thread) per engine that has
# SRV_CAP_WEBSOCKET (an engine that refuses the route is skipped with its
# reason), then bench/peers/tomcat/TomcatWsEcho.java (compiled with javac
# against Debian's libtomcat10-embed-java; skipped, saying what is missing,
# without it). For each server, with bench/ws-load as the client:
#   1. memory: its VmRSS idle, then with IDLE sockets open (handshake done,
#      then silent), sampled 1 s after the last one opened; the growth over
#      the sockets is the cost of one;
#   2. echo: CLIENTS clients each send a 32-byte text message, wait for its
#      echo and send the next; one WS_WARMUP-second run first (not
#      counted: the JVM's JIT warms there, every server gets it), then
#      WS_RUNS runs of SECONDS; the median run's messages/s, its round-trip
#      p50/p99, and the ratio to Tomcat's median.
# Usage: bench/ws_measure.sh [BUILD_DIR] [IDLE] [SECONDS] [CLIENTS]
#        (defaults build, 10000, 4, 50; WS_RUNS=3, WS_WARMUP=5; JAVA_OPTS
#        is passed to the JVM)
set -eu
build=${1:-build}
idle_n=${2:-10000}
secs=${3:-4}
clients=${4:-50}
runs=${WS_RUNS:-3}
warmup=${WS_WARMUP:-5}
here=$(cd "$(dirname "$0")" && pwd)
load=$build/bench/ws-load
for f in "$load" "$build/bench/ws_echo" "$build/srv_engines.txt"; do
    [ -e "$f" ] || { echo "ws_measure: $f is missing: build first (ninja -C $build)" >&2; exit 1; }
done
# Each socket is one descriptor in the client and one in the server.
if ! ulimit -n $((idle_n + 1000)) 2>/dev/null; then
    hard=$(ulimit -Hn)
    echo "ws_measure: the open-file limit cannot reach $((idle_n + 1000)) (hard limit" \
         "$hard): holding $((hard - 1000)) sockets instead; raise it for $idle_n" >&2
    idle_n=$((hard - 1000))
    ulimit -n "$hard"
fi
tmp=$(mktemp -d)
spid='' hpid=''
cleanup() {
    for p in $hpid $spid; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; } # KEY=value from ws-load's lines
rss() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status"; }
note() { echo "ws_measure: $*" >&2; }

# start NAME TIMEOUT CMD...: run a server, wait for its start line (which
# names its port); sets spid and port. Returns 1 if it exited first.
start() {
    name=$1 limit=$2
    shift 2
    : > "$tmp/$name.out" # there before the loop reads it, not when the job opens it
    "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
    spid=$!
    i=0
    while :; do
        port=$(sed -n -e 's/.* on port \([0-9][0-9]*\)$/\1/p' \
                      -e 's|.*//127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' "$tmp/$name.out" | head -n 1)
        [ -n "$port" ] && return 0
        if ! kill -0 "$spid" 2>/dev/null; then
            wait "$spid" 2>/dev/null || true
            spid=
            return 1
        fi
        i=$((i + 1))
        if [ $i -gt $((limit * 10)) ]; then
            note "$name did not start within $limit s"
            stop
            return 1
        fi
        sleep 0.1
    done
}

# stop: SIGTERM to the server started last, SIGKILL after 15 s.
stop() {
    [ -n "$spid" ] || return 0
    kill "$spid" 2>/dev/null || true
    i=0
    while kill -0 "$spid" 2>/dev/null && [ $i -lt 150 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -9 "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    spid=
}

# measure NAME: both measurements on the server just started; appends its
# row to $tmp/rows: name rate runs p50 p99 idle held per-socket opened.
measure() {
    name=$1
    url=ws://127.0.0.1:$port/echo
    sleep 0.5
    idle=$(rss "$spid")
    rm -f "$tmp/ready"
    "$load" hold -c "$idle_n" -t 60 --hold 120 --ready "$tmp/ready" "$url" \
        > "$tmp/hold.out" 2> "$tmp/hold.err" &
    hpid=$!
    while [ ! -s "$tmp/ready" ] && kill -0 "$hpid" 2>/dev/null; do
        sleep 0.2
    done
    held=- opened=0
    if [ -s "$tmp/ready" ]; then
        sleep 1 # what the last handshakes left settles
        held=$(rss "$spid")
        opened=$(awk '{print $2}' "$tmp/ready")
    fi
    kill "$hpid" 2>/dev/null || true
    wait "$hpid" 2>/dev/null || true
    hpid=
    note "$name: $(cat "$tmp/hold.out" "$tmp/hold.err")"
    per=-
    [ "$held" != - ] && [ "$opened" -gt 0 ] &&
        per=$(awk -v h="$held" -v i="$idle" -v n="$opened" 'BEGIN {printf "%.1f", (h - i) / n}')
    "$load" echo -c "$clients" -d "$warmup" "$url" > "$tmp/warm.out" 2>&1 || true
    note "$name: warm-up $(cat "$tmp/warm.out")"
    : > "$tmp/echo"
    r=0
    while [ $r -lt "$runs" ]; do
        "$load" echo -c "$clients" -d "$secs" "$url" > "$tmp/run.out" 2> "$tmp/run.err" || true
        note "$name: $(cat "$tmp/run.out" "$tmp/run.err")"
        grep '^echo ' "$tmp/run.out" >> "$tmp/echo" || echo "echo rate=0" >> "$tmp/echo"
        r=$((r + 1))
    done
    # The median run by rate, and every run's rate beside it.
    all=$(field rate < "$tmp/echo" | sort -n | tr '\n' ' ')
    med=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^rate=/) print substr($i, 6), NR}' \
          "$tmp/echo" | sort -n | sed -n "$(((runs + 1) / 2))p" | awk '{print $2}')
    line=$(sed -n "${med:-1}p" "$tmp/echo")
    rate=$(echo "$line" | field rate)
    p50=$(echo "$line" | field p50_ms)
    p99=$(echo "$line" | field p99_ms)
    echo "$name ${rate:-0} $(echo "$all" | sed 's/ *$//; s/ /,/g') ${p50:--} ${p99:--} $idle $held $per $opened" \
        >> "$tmp/rows"
}

: > "$tmp/rows"
: > "$tmp/skipped"
for e in $(cat "$build/srv_engines.txt"); do
    if ! start "$e" 10 env SRV_MAX_CONNECTIONS=$((idle_n + 100)) \
            "$build/bench/ws_echo" --engine "$e" --host 127.0.0.1 --port 0; then
        echo "$e skipped: $(head -n 1 "$tmp/$e.err")" >> "$tmp/skipped"
        continue
    fi
    measure "$e"
    stop
done

# Tomcat: compiled once per source, jar set and javac into the cache the
# Greetings peer uses (bench/compare's scheme), never into the tree.
jars="tomcat10-embed-core.jar tomcat10-embed-websocket.jar jakarta-annotation-api.jar"
missing=
for t in java javac; do command -v $t > /dev/null || missing="$missing $t"; done
cp=
for j in $jars; do
    if [ -e "/usr/share/java/$j" ]; then
        cp=${cp:+$cp:}$(readlink -f "/usr/share/java/$j")
    else
        missing="$missing /usr/share/java/$j"
    fi
done
if [ -n "$missing" ]; then
    echo "tomcat skipped: missing$missing (scripts/install-deps.sh --peers)" >> "$tmp/skipped"
else
    src=$here/peers/tomcat/TomcatWsEcho.java
    hash=$({ cat "$src"; echo "$cp"; readlink -f "$(command -v javac)"; } | sha256sum | cut -c1-16)
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/libsrv-bench
    cls=$cache/tomcat-ws-$hash
    if [ ! -e "$cls/TomcatWsEcho.class" ]; then
        note "tomcat: compiling $src with javac into $cls"
        mkdir -p "$cache"
        ctmp=$(mktemp -d "$cache/.tomcat-ws-XXXXXX")
        javac -encoding UTF-8 -nowarn -d "$ctmp" -cp "$cp" "$src"
        mv "$ctmp" "$cls" 2>/dev/null || rm -rf "$ctmp" # a concurrent run compiled it first
    fi
    # shellcheck disable=SC2086 # JAVA_OPTS is a list of options
    if start tomcat 60 java ${JAVA_OPTS:-} -cp "$cls:$cp" TomcatWsEcho --port 0 \
            --max-connections $((idle_n + 100)); then
        measure tomcat
        stop
    else
        echo "tomcat skipped: it did not start: $(tail -n 3 "$tmp/tomcat.err" | tr '\n' ' ')" \
            >> "$tmp/skipped"
    fi
fi

trate=$(awk '$1 == "tomcat" {print $2}' "$tmp/rows")
echo "WebSocket: echo of 32-byte text messages, $clients clients, median of $runs x $secs s" \
     "(after a $warmup s warm-up); RSS of $idle_n idle sockets"
printf '%-11s %10s %-24s %9s %8s %8s %9s %9s %11s %7s\n' server 'msg/s' runs 'vs tomcat' \
    'p50 ms' 'p99 ms' 'idle KiB' 'held KiB' 'KiB/socket' sockets
while read -r n rate all p50 p99 idle held per opened; do
    vs=-
    [ -n "$trate" ] && [ "$trate" != 0 ] &&
        vs=$(awk -v a="$rate" -v b="$trate" 'BEGIN {printf "%.2fx", a / b}')
    printf '%-11s %10s %-24s %9s %8s %8s %9s %9s %11s %7s\n' "$n" "$rate" "$all" "$vs" \
        "$p50" "$p99" "$idle" "$held" "$per" "$opened"
done < "$tmp/rows"
sed 's/^/  /' "$tmp/skipped"
