#!/usr/bin/env python3
"""A SIGTERM sent the moment Greetings prints its start line is a graceful
stop (exit 0), never a kill by the default action: the start line comes
before srv_server_run installs its handlers, so Greetings blocks the stop
signals before starting and srv_server_run unblocks them (a pending one is
handled then). Supervisors and tests send SIGTERM as soon as a process says
it serves. Twenty rounds per engine, each also with SIGINT.
Usage: early_sigterm.py GREETINGS ENGINE"""
import signal
import subprocess
import sys

greetings, engine = sys.argv[1], sys.argv[2]
for i in range(20):
    sig = signal.SIGTERM if i % 2 == 0 else signal.SIGINT
    p = subprocess.Popen([greetings, "--engine", engine, "--host", "127.0.0.1", "--port", "0",
                          "--sleep-ms", "0", "--threads", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    line = p.stdout.readline()
    p.send_signal(sig)
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        print(f"FAIL ({engine}): round {i}: greetings did not stop within 30 s of {sig.name}")
        sys.exit(1)
    rest = p.stdout.read()
    if "listening on" not in line or rc != 0:
        print(f"FAIL ({engine}): round {i}: {sig.name} right after the start line: exit {rc} "
              f"(a negative exit is the signal's default action); output: {line!r} {rest!r}")
        sys.exit(1)
print(f"ok ({engine}): 20 stops by SIGTERM/SIGINT sent right after the start line, all graceful")
