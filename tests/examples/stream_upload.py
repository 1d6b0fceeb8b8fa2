#!/usr/bin/env python3
"""examples/stream's PUT/POST /upload on one engine: a body with a length,
a chunked one and an empty one come back as "<bytes> <sha256-hex>"; an engine
without streamed request bodies (SRV_CAP_STREAM_BODY) must say at start that
it skips the route, never serve it by buffering.
Usage: stream_upload.py STREAM ENGINE"""
import hashlib
import http.client
import os
import subprocess
import sys

stream, engine = sys.argv[1], sys.argv[2]


def fail(msg):
    print(f"FAIL ({engine}): {msg}")
    p.kill()
    sys.exit(1)


p = subprocess.Popen([stream, "--engine", engine, "--host", "127.0.0.1", "--port", "0"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines = []
port = None
while port is None:
    line = p.stdout.readline()
    if not line:
        fail(f"no start line: {lines!r}")
    lines.append(line)
    if " engine on port " in line:
        port = int(line.rsplit(" ", 1)[1])
if any("no PUT /upload" in line for line in lines):
    p.terminate()
    p.wait(timeout=20)
    print(f"ok ({engine}): no streamed request bodies, /upload refused at start: {lines[0].strip()}")
    sys.exit(0)

body = os.urandom(3 * 1024 * 1024 + 17)


def put(method, data, chunked):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    if chunked:
        pieces = (data[i:i + 65536] for i in range(0, len(data), 65536))
        c.request(method, "/upload", body=pieces, encode_chunked=True,
                  headers={"Transfer-Encoding": "chunked"})
    else:
        c.request(method, "/upload", body=data)
    r = c.getresponse()
    got = r.read().decode()
    c.close()
    want = f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"
    if r.status != 200 or got != want:
        fail(f"{method} ({'chunked' if chunked else 'length'}): {r.status} {got!r}, want {want!r}")


put("PUT", body, False)
put("PUT", body, True)
put("POST", body, False)
put("PUT", b"", False)
p.terminate()
if p.wait(timeout=20) != 0:
    fail("stream did not stop cleanly on SIGTERM")
print(f"ok ({engine}): /upload digests right (length, chunked, POST, empty)")
