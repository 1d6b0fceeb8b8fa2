#!/bin/sh
# bench/ir_hello.sh: user-space instructions per hello request of one
# greetings binary (valgrind callgrind, counted over a wrk run after a
# warm-up), a figure the shared machine's noise does not move, for A/B of
# per-request CPU work.
#   bench/ir_hello.sh GREETINGS ENGINE [HANDLERS] [SECS]
# Loopback only; the process it starts is stopped by its PID.
set -eu
bin=$1 engine=$2 handlers=${3:-inline} secs=${4:-4}
. "$(dirname "$0")/listening.sh"
dir=$(mktemp -d)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/cg.out" \
	"$bin" --engine "$engine" --host 127.0.0.1 --port 0 --sleep-ms 0 --threads 8 \
	--handlers "$handlers" >"$dir/log" 2>&1 &
pid=$!
wait_listening "$dir/log" $pid 600 0.1
url="http://127.0.0.1:$port/greetings?name=Bench"
wrk -t1 -c10 -d1s "$url" >/dev/null 2>&1 # warm-up
callgrind_control -i on $pid >/dev/null
n=$(wrk -t1 -c10 -d"${secs}s" "$url" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
callgrind_control -i off $pid >/dev/null
kill -TERM $pid; wait $pid 2>/dev/null || true
ir=$(cat "$dir"/cg.out* | sed -n "s/^\(summary\|totals\): *\([0-9]*\).*/\2/p" | awk '{s += $1} END {print s}')
echo "$engine $handlers: $n requests, $(echo "$ir $n" | awk '{printf "%.0f", $1 / $2}') instructions/request"
[ -z "${KEEP:-}" ] || cp "$dir"/cg.out "$KEEP" # for callgrind_annotate
rm -rf "$dir"
