#!/usr/bin/env python3
"""N concurrent server-sent-event clients of examples/stream (GET /events?count=8&interval_ms=1000)
on 127.0.0.1:PORT; prints how many events arrived. Usage: sse_clients.py N PORT
(raise ulimit -n above N first)."""
import asyncio, sys, time
N=int(sys.argv[1]); port=int(sys.argv[2])
got=0
async def one(i):
    global got
    r,w=await asyncio.open_connection('127.0.0.1',port)
    w.write(b"GET /events?count=8&interval_ms=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
    await w.drain()
    n=0
    while True:
        line=await r.readline()
        if not line: break
        if line.startswith(b"data:"):
            n+=1; got+=1
            if n==8: break
    w.close()
async def main():
    t=time.time()
    await asyncio.gather(*[one(i) for i in range(N)])
    print("events", got, "of", N*8, "in %.1f s"%(time.time()-t))
asyncio.run(main())
