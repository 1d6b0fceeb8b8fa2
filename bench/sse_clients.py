#!/usr/bin/env python3
"""N concurrent server-sent-event clients of examples/stream on 127.0.0.1:PORT.

Each client opens its own connection, sends GET /events?count=C&interval_ms=I
and reads events until it has C of them (or the server closes). Connections
are opened in waves so the listen backlog is not what is measured. Prints one
line of key=value figures:

  clients      connections that got a 200 and an event stream
  connect_s    seconds until the last of them had its first event
  events       events received, of clients * C expected
  gap_p50_ms, gap_p99_ms, gap_max_ms
               time between consecutive events on one connection (the
               server sends them I ms apart: a server that falls behind
               shows in the tail)
  failed       connections refused, reset or closed early (and why)

When every client holds its stream (all first events in) it writes
"all-connected" to the file named by --mark, so a caller can sample the
server's memory at that moment. Usage:
  sse_clients.py N PORT [--count C] [--interval-ms I] [--mark FILE]
Raise `ulimit -n` above N first. Standard library only.
"""
import argparse
import asyncio
import collections
import time


async def client(port, path, count, st):
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        st["failed"][type(e).__name__] += 1
        return
    try:
        w.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await w.drain()
        status = await r.readline()
        if not status.startswith(b"HTTP/1.1 200"):
            st["failed"][status.decode(errors="replace").strip() or "closed before a status"] += 1
            return
        n, last = 0, None
        while n < count:
            line = await r.readline()
            if not line:
                st["failed"]["closed after %d events" % n] += 1
                return
            if not line.startswith(b"id:"):
                continue  # one id: line per event; data:, event:, comments aside
            now = time.monotonic()
            n += 1
            st["events"] += 1
            if last is None:
                st["streaming"] += 1
                if st["streaming"] == st["n"]:
                    st["all_at"] = now
                    if st["mark"]:
                        with open(st["mark"], "w") as f:
                            f.write("all-connected\n")
            else:
                st["gaps"].append(now - last)
            last = now
    except OSError as e:
        st["failed"][type(e).__name__] += 1
    finally:
        w.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("n", type=int)
    p.add_argument("port", type=int)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--mark", default=None)
    p.add_argument("--wave", type=int, default=500, help="connections opened per 50 ms")
    a = p.parse_args()
    st = {"n": a.n, "events": 0, "streaming": 0, "gaps": [], "all_at": None, "mark": a.mark,
          "failed": collections.Counter()}
    path = f"/events?count={a.count}&interval_ms={a.interval_ms}"
    t0 = time.monotonic()
    tasks = []
    for i in range(0, a.n, a.wave):
        for _ in range(min(a.wave, a.n - i)):
            tasks.append(asyncio.ensure_future(client(a.port, path, a.count, st)))
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    gaps = sorted(st["gaps"]) or [0.0]

    def q(f):
        return gaps[min(len(gaps) - 1, int(f * len(gaps)))] * 1000

    connect = "%.1f" % (st["all_at"] - t0) if st["all_at"] else "-"
    failed = ",".join(f"{k}:{v}" for k, v in st["failed"].most_common()) or "0"
    print(f"clients={st['streaming']} connect_s={connect} events={st['events']}/{a.n * a.count} "
          f"gap_p50_ms={q(0.5):.0f} gap_p99_ms={q(0.99):.0f} gap_max_ms={gaps[-1] * 1000:.0f} "
          f"total_s={time.monotonic() - t0:.1f} failed={failed}")


asyncio.run(main())
