#!/usr/bin/env python3
"""systemd-style socket activation of greetings, as systemd does it: this
script holds the listening socket (systemd's role), starts greetings with it
as fd 3 and LISTEN_PID/LISTEN_FDS set, stops it, and while no greetings runs
a client connects and sends a request: the next greetings, given the same
socket, answers it. A restart refuses nothing.
Usage: socket_activation.py GREETINGS ENGINE"""
import os
import signal
import socket
import subprocess
import sys
import time

greetings, engine = sys.argv[1], sys.argv[2]
lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
lsock.bind(("127.0.0.1", 0))
lsock.listen(64)
port = lsock.getsockname()[1]


def fail(msg):
    print(f"FAIL ({engine}): {msg}")
    sys.exit(1)


def start():
    def child_setup():
        os.dup2(lsock.fileno(), 3)  # SD_LISTEN_FDS_START, inheritable
        os.environ["LISTEN_PID"] = str(os.getpid())  # exec keeps the pid
        os.environ["LISTEN_FDS"] = "1"

    # --port 0 would bind a random port: the start line must name the
    # socket's port instead, proving the inherited socket is served.
    p = subprocess.Popen([greetings, "--engine", engine, "--host", "127.0.0.1", "--port", "0",
                          "--sleep-ms", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=child_setup, pass_fds=(lsock.fileno(),), text=True)
    line = p.stdout.readline()
    if f"127.0.0.1:{port} " not in line:
        p.kill()
        fail(f"greetings did not serve the inherited socket (port {port}): {line!r}")
    return p


def get(sock_or_none=None):
    s = sock_or_none or socket.create_connection(("127.0.0.1", port), timeout=5)
    if sock_or_none is None:
        s.sendall(b"GET /greetings?name=S HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    data = b""
    s.settimeout(10)
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def wait_sigterm_caught(p):
    """Greetings prints its start line before srv_server_run installs the
    SIGTERM handler: a SIGTERM sent in between kills it (-15), which a
    loaded machine made happen. Wait until the handler is in place
    (/proc/PID/status SigCgt)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:") and int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1:
                    return
        if p.poll() is not None:
            fail(f"greetings exited {p.returncode} before it handled SIGTERM")
        time.sleep(0.01)
    fail("greetings did not handle SIGTERM within 20 s of its start")


def stop(p):
    wait_sigterm_caught(p)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=20)
    if rc != 0:
        fail(f"greetings exited {rc} after SIGTERM")


first = start()
if not get().startswith(b"HTTP/1.1 200") :
    fail("the first greetings did not answer 200")
stop(first)

# No greetings runs now: the socket still listens (we hold it), so this
# connection waits in its backlog with its request.
waiting = socket.create_connection(("127.0.0.1", port), timeout=5)
waiting.sendall(b"GET /greetings?name=Between HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
time.sleep(0.3)
second = start()
answer = get(waiting)
if not answer.startswith(b"HTTP/1.1 200") or not answer.rstrip().endswith(b" Between!"):
    fail(f"the request made between the two processes got {answer[:80]!r}")
if not get().startswith(b"HTTP/1.1 200"):
    fail("the second greetings did not answer 200")
stop(second)
print(f"ok ({engine}): socket activation on port {port}; a request sent while no process ran "
      "was answered by the next one")
