#!/bin/sh
# greetings --processes 2 on one engine: two children serve one port
# (SO_REUSEPORT), a killed child is replaced, SIGTERM stops them all
# gracefully and the parent exits 0. Usage: processes.sh GREETINGS ENGINE
set -u
bin=$1
engine=$2
fail() { echo "FAIL ($engine): $*"; [ -n "${parent:-}" ] && kill -9 "$parent" 2>/dev/null; pkill -9 -P "${parent:-0}" 2>/dev/null; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
out=$(mktemp)
"$bin" --engine "$engine" --host 127.0.0.1 --port "$port" --processes 2 --sleep-ms 0 \
    >"$out" 2>&1 &
parent=$!
children() { pgrep -P "$parent" | sort; }
i=0
until [ "$(grep -c 'listening on' "$out")" -ge 2 ]; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "two processes did not start: $(cat "$out")"
    sleep 0.1
done
first=$(children)
[ "$(echo "$first" | wc -l)" -eq 2 ] || fail "want 2 children, have: $first"
serve() {
    n=0
    while [ $n -lt 20 ]; do
        body=$(curl -s --max-time 5 "http://127.0.0.1:$port/greetings?name=P") ||
            fail "request $n failed ($1)"
        case "$body" in *" P!") ;; *) fail "request $n answered '$body' ($1)" ;; esac
        n=$((n + 1))
    done
}
serve "both children up"
victim=$(echo "$first" | head -1)
kill -9 "$victim"
i=0
while :; do
    now=$(children)
    if [ "$(echo "$now" | grep -c .)" -eq 2 ] && ! echo "$now" | grep -qx "$victim"; then break; fi
    i=$((i + 1)); [ $i -gt 100 ] && fail "the killed child was not replaced: $now"
    sleep 0.1
done
grep -q "died of signal 9" "$out" || fail "the parent did not report the death: $(cat "$out")"
# The replacement must be listening before the next round.
i=0
until [ "$(grep -c 'listening on' "$out")" -ge 3 ]; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "the replacement did not start: $(cat "$out")"
    sleep 0.1
done
serve "after a child was killed"
last=$(children)
# A child prints its start line before srv_server_run installs its SIGTERM
# handler: the SIGTERM the parent passes on would kill one still in between
# (signal 15, and the parent exits 1), which a loaded machine made happen.
# Wait until every child handles SIGTERM (/proc/PID/status SigCgt).
sigterm_caught() {
    mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
    [ -n "$mask" ] && [ $(( 0x$mask >> 14 & 1 )) -eq 1 ]
}
for c in $last; do
    i=0
    until sigterm_caught "$c"; do
        i=$((i + 1)); [ $i -gt 200 ] && fail "child $c did not handle SIGTERM within 20 s"
        sleep 0.1
    done
done
kill -TERM "$parent"
i=0
while kill -0 "$parent" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 150 ] && fail "the parent did not exit 15 s after SIGTERM"
    sleep 0.1
done
wait "$parent"
rc=$?
parent=
[ $rc -eq 0 ] || fail "the parent exited $rc after SIGTERM: $(cat "$out")"
for c in $last; do
    kill -0 "$c" 2>/dev/null && fail "child $c outlived the parent"
done
rm -f "$out"
echo "ok ($engine): 2 processes on port $port, a killed one replaced, all stopped with exit 0"
