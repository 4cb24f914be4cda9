"""Python download goodput against `tcpls serve` (perf mode): one or more streams each ask for
their share of BYTES with the request of `tcpls perf --download` (tcpls-cli/src/perf_proto.rs)
and read it to the end, with the asyncio API (default) or the blocking one.

    python3 tcpls-py/bench/download.py 127.0.0.1:4443 --bytes 1G [--streams 1] [--blocking] [--chunk 1M]

Prints one JSON line: bytes, seconds, gbit_per_s, the process's CPU seconds (user, system) and
those of the Python thread alone.
"""

import argparse
import asyncio
import json
import os
import struct
import threading
import time

import tcpls
import tcpls.aio


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def request(seed, nbytes):
    # magic, direction 2 = download, 3 reserved bytes, seed, bytes, milliseconds (0: no limit)
    return b"TCPLSPF1" + bytes([2, 0, 0, 0]) + struct.pack(">IQQ", seed, nbytes, 0)


def shares(total, streams):
    return [total // streams + (total % streams if i == 0 else 0) for i in range(streams)]


async def run_async(args):
    async with await tcpls.aio.connect(args.addr, insecure=True) as session:
        async def one(seed, nbytes):
            stream = await session.open_stream()
            await stream.write(request(seed, nbytes))
            got = 0
            while True:
                data = await stream.read(args.chunk)
                if not data:
                    break
                got += len(data)
            await stream.finish()
            return got

        started = time.perf_counter()
        counts = await asyncio.gather(*(one(i, n) for i, n in enumerate(shares(args.bytes, args.streams))))
        return sum(counts), time.perf_counter() - started


def run_blocking(args):
    with tcpls.connect(args.addr, insecure=True) as session:
        counts = [0] * args.streams

        def one(i, nbytes):
            stream = session.open_stream()
            stream.write(request(i, nbytes))
            while True:
                data = stream.read(args.chunk)
                if not data:
                    break
                counts[i] += len(data)
            stream.finish()

        started = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i, n)) for i, n in enumerate(shares(args.bytes, args.streams))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts), time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("addr")
    parser.add_argument("--bytes", type=size, default=1 << 30)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--chunk", type=size, default=1 << 20)
    parser.add_argument("--blocking", action="store_true")
    args = parser.parse_args()
    before, main_before = os.times(), time.thread_time()
    got, seconds = run_blocking(args) if args.blocking else asyncio.run(run_async(args))
    after, main_after = os.times(), time.thread_time()
    if got != args.bytes:
        raise SystemExit(f"received {got} of {args.bytes} bytes")
    print(json.dumps({
        "api": "blocking" if args.blocking else "asyncio",
        "bytes": got,
        "streams": args.streams,
        "chunk": args.chunk,
        "seconds": round(seconds, 4),
        "gbit_per_s": round(got * 8 / seconds / 1e9, 3),
        "cpu_user_s": round(after.user - before.user, 3),
        "cpu_system_s": round(after.system - before.system, 3),
        # The interpreter's thread alone (the event loop, the calls, the bytes objects); the
        # rest of the CPU time is the library's runtime threads (receive, decrypt).
        "main_thread_cpu_s": round(main_after - main_before, 3),
    }))


if __name__ == "__main__":
    main()
