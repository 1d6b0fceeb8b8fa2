#!/usr/bin/env python3
"""examples/chat on one engine: GET / is the page, /health is UP, and a text
message sent by one of three WebSocket clients reaches all three (the sender
included); a message over --max-message-bytes closes its socket with 1009; a
stop closes the others with 1001. An engine without SRV_CAP_WEBSOCKET must
refuse /chat at start with a message saying so.
Usage: chat.py CHAT ENGINE"""
import base64
import hashlib
import http.client
import os
import socket
import struct
import subprocess
import sys

chat, engine = sys.argv[1], sys.argv[2]
p = subprocess.Popen([chat, "--engine", engine, "--host", "127.0.0.1", "--port", "0",
                      "--max-message-bytes", "100"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def fail(msg):
    print(f"FAIL ({engine}): {msg}")
    p.kill()
    sys.exit(1)


line = p.stdout.readline()
if "cannot serve WebSocket" in line:
    p.wait(timeout=20)
    if p.returncode == 0:
        fail("refused /chat but exited 0")
    print(f"ok ({engine}): no SRV_CAP_WEBSOCKET, /chat refused at start: {line.strip()}")
    sys.exit(0)
if " engine on port " not in line:
    fail(f"no start line: {line!r}")
port = int(line.rsplit(" ", 1)[1])

c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/health")
r = c.getresponse()
if r.status != 200 or r.read() != b"UP":
    fail(f"/health: {r.status}")
c.request("GET", "/")
r = c.getresponse()
page = r.read()
if r.status != 200 or b"new WebSocket" not in page or not r.getheader("content-type", "").startswith("text/html"):
    fail(f"GET /: {r.status} {r.getheader('content-type')}")
c.close()


def connect():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            fail("handshake: closed")
        head += b
    want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                                         .encode()).digest()).decode()
    if not head.startswith(b"HTTP/1.1 101") or want.encode() not in head:
        fail(f"handshake: {head!r}")
    return s


def send(s, op, payload):
    mask = os.urandom(4)
    n = len(payload)
    h = bytes([0x80 | op])
    h += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    s.sendall(h + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        got = s.recv(n - len(b))
        if not got:
            fail("closed mid-frame")
        b += got
    return b


def recv(s):
    b0, b1 = recv_exact(s, 2)
    n = b1 & 0x7f
    if n == 126:
        n = struct.unpack("!H", recv_exact(s, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(s, 8))[0]
    return b0 & 0x0f, recv_exact(s, n)


a, b, d = connect(), connect(), connect()
# The 101 is out before the server runs on_open (the room's join): a pong
# proves it ran, as on_open comes before any input on the socket.
for who, s in (("a", a), ("b", b), ("d", d)):
    send(s, 9, b"joined?")
    op, data = recv(s)
    if op != 10 or data != b"joined?":
        fail(f"{who}: ping answered with opcode {op} {data!r}")
send(a, 1, "hello, room é".encode())
for who, s in (("sender", a), ("b", b), ("d", d)):
    op, data = recv(s)
    if op != 1 or data != "hello, room é".encode():
        fail(f"{who} got opcode {op} {data!r}")
send(b, 1, b"x" * 101)
op, data = recv(b)
if op != 8 or struct.unpack("!H", data[:2])[0] != 1009:
    fail(f"over the limit: opcode {op} {data!r}")
b.close()
p.terminate()
for who, s in (("a", a), ("d", d)):
    op, data = recv(s)
    if op != 8 or struct.unpack("!H", data[:2])[0] != 1001:
        fail(f"{who} at the stop: opcode {op} {data!r}")
    s.close()
p.wait(timeout=20)
if p.returncode != 0:
    fail(f"exit status {p.returncode}")
print(f"ok ({engine}): page, health, broadcast to 3, 1009 over the limit, 1001 at the stop")
