"""Throughput of the Python client against a running broker.

    python3 bench.py --addr 127.0.0.1:5555 --mode produce --count 100000 --size 1024
    python3 bench.py --addr 127.0.0.1:5555 --mode consume --count 100000 --size 1024

produce: one producer with --outstanding (256) single-message sends in
flight (concurrent sends share Enqueue frames). consume: the queue is
filled first (not timed), then one subscription with --prefetch (1024)
acks every delivery on its own (concurrent acks share Ack frames). Prints
one JSON line: {"client": "python", "mode": ..., "msgs_per_s": ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))

import fila  # noqa: E402
from fila import Message  # noqa: E402


async def produce(c: fila.Client, queue: str, count: int, size: int, outstanding: int) -> float:
    payload = os.urandom(size)
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await c.producer.send(Message(queue, payload))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(outstanding, count))))
    return count / (time.perf_counter() - start)


async def consume(c: fila.Client, queue: str, count: int, size: int, prefetch: int) -> float:
    payload = os.urandom(size)
    for off in range(0, count, 1000):
        await c.producer.send_batch([Message(queue, payload) for _ in range(min(1000, count - off))])
    sub = await c.consumer.subscribe(queue, prefetch=prefetch)
    got = 0
    acks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    async for d in sub:
        t = asyncio.ensure_future(d.ack())
        acks.add(t)
        t.add_done_callback(acks.discard)
        got += 1
        if got == count:
            break
    await asyncio.gather(*acks)
    rate = count / (time.perf_counter() - start)
    await sub.close()
    return rate


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--addr", default="127.0.0.1:5555")
    ap.add_argument("--mode", choices=["produce", "consume"], required=True)
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--outstanding", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=1024)
    a = ap.parse_args()
    c = await fila.Client.connect(a.addr, client_name="fila-python-bench")
    queue = f"bench-python-{a.mode}-{os.urandom(4).hex()}"
    await c.admin.create_queue(queue)
    try:
        if a.mode == "produce":
            rate = await produce(c, queue, a.count, a.size, a.outstanding)
        else:
            rate = await consume(c, queue, a.count, a.size, a.prefetch)
    finally:
        await c.admin.delete_queue(queue)
        await c.close()
    print(json.dumps({"client": "python", "mode": a.mode, "msgs_per_s": round(rate, 1)}))


if __name__ == "__main__":
    asyncio.run(main())
