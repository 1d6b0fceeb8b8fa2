#!/bin/sh
# bench/ab_hello.sh: A/B the hello endpoint of two greetings binaries on one
# engine, by throughput and by the server's CPU time per request (utime +
# stime of all its threads over the run, /proc/PID/stat). On a shared
# machine single runs lie, so the two binaries alternate
# (A B A B ...) under the same wrk -t2 -c100 load, each on its own fresh
# process, and the medians are compared. bench/ir_hello.sh counts the
# user-space instructions per request (callgrind), which noise does not move.
#   bench/ab_hello.sh OLD_GREETINGS NEW_GREETINGS ENGINE [HANDLERS] [REPS] [SECS]
# HANDLERS: inline (default) or worker. Loopback only; every process it starts
# is stopped by its PID.
set -eu
old=$1 new=$2 engine=$3 handlers=${4:-inline} reps=${5:-5} secs=${6:-3}
. "$(dirname "$0")/listening.sh"

start() { # binary -> sets pid, port
	log=$(mktemp)
	"$1" --engine "$engine" --host 127.0.0.1 --port 0 --sleep-ms 0 \
		--handlers "$handlers" >"$log" 2>&1 &
	pid=$!
	wait_listening "$log" $pid 100 0.05
	rm -f "$log"
}

ticks() { awk '{print $14 + $15, $14}' /proc/$pid/stat; } # the server's CPU (all, user), all threads

run() { # binary -> prints "req/s cpu-us-per-request"
	start "$1"
	url="http://127.0.0.1:$port/greetings?name=Bench"
	wrk -t2 -c100 -d1s "$url" >/dev/null 2>&1 # warm-up
	t0=$(ticks)
	out=$(wrk -t2 -c100 -d"${secs}s" "$url")
	t1=$(ticks)
	kill -TERM $pid; wait $pid 2>/dev/null || true
	rps=$(echo "$out" | sed -n 's/^Requests\/sec: *//p')
	n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
	echo "$rps $(echo "$t0 $t1 $n $(getconf CLK_TCK)" | awk '{printf "%.2f %.2f", ($3 - $1) / $6 * 1e6 / $5, ($4 - $2) / $6 * 1e6 / $5}')"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

A="" B="" CA="" CB="" UA="" UB=""
r=0
while [ $r -lt "$reps" ]; do
	set -- $(run "$old") $(run "$new")
	echo "rep $((r + 1)): old $1 req/s $2 us/req ($3 user); new $4 req/s $5 us/req ($6 user)" >&2
	A="$A $1"; CA="$CA $2"; UA="$UA $3"; B="$B $4"; CB="$CB $5"; UB="$UB $6"
	r=$((r + 1))
done
m() { echo $1 | tr ' ' '\n' | median; }
x() { echo "$1 $2" | awk '{printf "%.3f", $1 / $2}'; }
ma=$(m "$A") mb=$(m "$B") ca=$(m "$CA") cb=$(m "$CB") ua=$(m "$UA") ub=$(m "$UB")
echo "$engine $handlers, medians of $reps: req/s old $ma new $mb ($(x $mb $ma)x);" \
	"server CPU us/req old $ca new $cb ($(x $cb $ca)x), of it user old $ua new $ub ($(x $ub $ua)x)"
