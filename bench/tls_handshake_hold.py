#!/usr/bin/env python3
"""bench/tls_handshake_hold.py: what a server spends while a TLS handshake
waits for its client.

For each engine, start greetings over HTTPS on a free loopback port, make a
TLS 1.3 handshake with Python's ssl on memory BIOs, and once the client has
the server's whole flight, hold the client's Finished for --hold seconds
(as a client on a real network does for a round trip, or a slow one for
longer). The server's CPU time (utime + stime of its process, all threads,
from /proc/PID/stat) over the hold is printed beside the same over an idle
stretch of the same length. A server that waits idle spends next to nothing;
libmicrohttpd 0.9.75's epoll loop spins on such a connection (GnuTLS reads
the socket itself during the handshake, so MHD never sees the EAGAIN that
clears its read-ready mark), a whole core for the whole hold: the mhd engine
suspends the connection meanwhile (emhd_tls_pull), and this shows whether
that works. Then the Finished and a request go out and the answer must be a
200.

Usage: bench/tls_handshake_hold.py [--build-dir build] [--engines mhd,...]
       [--hold 1.0] [--tls-key ec-p256|rsa2048] [--reps 3]
Loopback only; every process it starts is stopped by its PID; each step is
bounded (a server that does not start in 10 s, or a read that waits 10 s,
fails the run). Python 3.9+ standard library and the openssl CLI.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = {"rsa2048": ["-newkey", "rsa:2048"],
        "ec-p256": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]}


def cpu_s(pid):
    """utime + stime of the process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_cert(d, key):
    cert, keyf = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", *KEYS[key], "-nodes", "-keyout", keyf,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, keyf


def start(greetings, engine, cert, key, log):
    p = subprocess.Popen([greetings, "--engine", engine, "--host", "127.0.0.1", "--port", "0",
                          "--sleep-ms", "0", "--tls-cert", cert, "--tls-key", key],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"greetings --engine {engine} exited ({p.returncode})")
        log.flush()
        with open(log.name, errors="replace") as f:
            m = re.search(r"listening on https://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return p, int(m.group(1))
        time.sleep(0.05)
    stop(p)
    raise RuntimeError(f"greetings --engine {engine} did not start in 10 s")


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()  # only the server this script started
            p.wait()


def recv_some(s):
    d = s.recv(65536)
    if not d:
        raise RuntimeError("the server closed the connection")
    return d


def held_handshake(port, cafile, pid, hold):
    """CPU seconds the server spent while the client held its Finished."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="127.0.0.1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                d = out.read()
                if d:
                    s.sendall(d)
                inc.write(recv_some(s))
        # Our side is done; the server waits for the Finished still in `out`.
        c0 = cpu_s(pid)
        time.sleep(hold)
        used = cpu_s(pid) - c0
        s.sendall(out.read())
        obj.write(b"GET /greetings HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        s.sendall(out.read())
        got = b""
        while b"\r\n" not in got:
            try:
                got += obj.read(4096)
            except ssl.SSLWantReadError:
                inc.write(recv_some(s))
        if not got.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"no 200 after the held Finished: {got[:40]!r}")
    return used


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--engines", help="comma-separated (default: the build's, srv_engines.txt)")
    p.add_argument("--hold", type=float, default=1.0, help="seconds (default 1)")
    p.add_argument("--tls-key", default="ec-p256", choices=sorted(KEYS))
    p.add_argument("--reps", type=int, default=3, help="holds per engine, median shown")
    a = p.parse_args()
    greetings = os.path.join(a.build_dir, "examples", "greetings", "greetings")
    if not a.engines:
        try:
            with open(os.path.join(a.build_dir, "srv_engines.txt")) as f:
                a.engines = ",".join(f.read().split())
        except OSError:
            sys.exit(f"needs {a.build_dir}/srv_engines.txt (meson setup {a.build_dir}) or --engines")
    if not os.access(greetings, os.X_OK) or not shutil.which("openssl"):
        sys.exit(f"needs {greetings} (ninja -C {a.build_dir}) and the openssl CLI")
    print(f"| engine | server CPU while a client holds its Finished {a.hold:g} s | "
          f"server CPU idle {a.hold:g} s |")
    print("|---|---|---|")
    failed = False
    with tempfile.TemporaryDirectory(prefix="libsrv-hold-") as d:
        cert, key = make_cert(d, a.tls_key)
        for e in a.engines.split(","):
            log = open(os.path.join(d, f"{e}.log"), "w+")
            try:
                srv, port = start(greetings, e, cert, key, log)
            except RuntimeError as ex:
                print(f"| {e} | not run: {ex} | |")
                failed = True
                continue
            try:
                held, idle = [], []
                for _ in range(a.reps):
                    c0 = cpu_s(srv.pid)
                    time.sleep(a.hold)
                    idle.append(cpu_s(srv.pid) - c0)
                    held.append(held_handshake(port, cert, srv.pid, a.hold))
                print(f"| {e} | {1000 * statistics.median(held):.0f} ms "
                      f"({', '.join(f'{1000 * x:.0f}' for x in held)}) | "
                      f"{1000 * statistics.median(idle):.0f} ms |")
            except (RuntimeError, OSError, ssl.SSLError) as ex:
                print(f"| {e} | error: {ex} | |")
                failed = True
            finally:
                stop(srv)
                log.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
