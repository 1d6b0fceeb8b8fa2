#!/bin/sh
# bench/tls_reload_under_load.sh: certificate reload under load. Greetings
# serves HTTPS on one engine while h2load opens new TLS connections in a
# loop (200 connections of one request each, per run) for 8 s, and the
# certificate files are swapped between an RSA 2048 and an ECDSA P-256 one
# before each of 7 SIGHUPs (srv_server_run reloads on SIGHUP). Prints the
# requests that succeeded and failed, and the key type served afterwards
# (ECDSA after an odd number of swaps).
#   bench/tls_reload_under_load.sh GREETINGS ENGINE
# Loopback only; certificates are made in a temp directory with openssl.
set -eu
bin=$1 engine=$2
. "$(dirname "$0")/listening.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mk() { # name, openssl -newkey argument...
	n=$1; shift
	openssl req -x509 -nodes -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 \
		-keyout "$dir/$n.key" -out "$dir/$n.crt" "$@" 2>/dev/null
}
mk rsa -newkey rsa:2048
mk ec -newkey ec -pkeyopt ec_paramgen_curve:P-256
use() { cp "$dir/$1.key" "$dir/cur.key"; cp "$dir/$1.crt" "$dir/cur.crt"; }
use rsa
"$bin" --engine "$engine" --host 127.0.0.1 --port 0 --sleep-ms 0 \
	--tls-cert "$dir/cur.crt" --tls-key "$dir/cur.key" >"$dir/log" 2>&1 &
pid=$!
wait_listening "$dir/log" $pid 100 0.1
(for k in 1 2 3 4 5 6 7; do
	sleep 1
	if [ $((k % 2)) = 1 ]; then use ec; else use rsa; fi
	kill -HUP $pid
done) &
swaps=$!
ok=0 bad=0 end=$(($(date +%s) + 8))
while [ "$(date +%s)" -lt $end ]; do
	line=$(timeout 20 h2load --h1 -n 200 -c 200 "https://127.0.0.1:$port/greetings?name=R" 2>&1 |
		grep '^requests:' || echo "requests: 0 succeeded, 200 failed, 0 errored")
	ok=$((ok + $(echo "$line" | sed -n 's/.* \([0-9]*\) succeeded.*/\1/p')))
	bad=$((bad + $(echo "$line" | sed -n 's/.* \([0-9]*\) failed, \([0-9]*\) errored.*/\1 + \2/p')))
done
wait $swaps
served=$(echo | openssl s_client -connect "127.0.0.1:$port" 2>/dev/null |
	openssl x509 -noout -text | sed -n 's/.*Public Key Algorithm: *//p' | head -n1)
kill -TERM $pid
wait $pid || true
echo "$engine: $ok requests succeeded, $bad failed or errored, across 7 reloads; served after: $served"
grep -v 'listening on' "$dir/log" || true
