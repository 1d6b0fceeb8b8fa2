# bench/listening.sh: sourced by the bench shell scripts that start greetings
# themselves (ab_hello.sh, ir_hello.sh).
# wait_listening LOG PID TRIES PAUSE: wait until the greetings whose output
# goes to LOG says "listening on" (at most TRIES checks PAUSE seconds apart;
# past that, print LOG, stop PID and exit 1), then set port to the port it
# listens on (it was started with --host 127.0.0.1 --port 0).
wait_listening() {
	_i=0
	while ! grep -q 'listening on' "$1"; do
		_i=$((_i + 1))
		[ "$_i" -lt "$3" ] || { cat "$1"; kill "$2"; exit 1; }
		sleep "$4"
	done
	port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1" | head -n1)
}
