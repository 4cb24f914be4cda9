#!/usr/bin/env python3
"""C API bulk goodput next to `tcpls perf`: the same `tcpls serve`, sizes and streams, runs
interleaved (perf, C, perf, C, ...) so that a busy machine slows both alike.

    cargo build --release -p tcpls-cli -p tcpls-ffi
    python3 tcpls-ffi/bench/compare.py [--rounds 5] [--bytes 8G] [--streams 4]

Each run's goodput comes from the program's own JSON report (both verify every byte); its CPU
time (user + system, all threads) from the kernel. Prints every run, then the medians and the
ratio C / perf per direction.
"""

import argparse
import json
import os
import pathlib
import resource
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
RELEASE = ROOT / "target" / "release"


def cpu_of(cmd):
    """Runs cmd; returns (stdout, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", default="8G")
    parser.add_argument("--streams", type=int, default=4)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp())
    client = work / "tcpls-client"
    subprocess.run(
        ["cc", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-pthread", f"-I{ROOT}/tcpls-ffi/include",
         str(ROOT / "tcpls-ffi/examples/c/client.c"), f"-L{RELEASE}", "-ltcpls", f"-Wl,-rpath,{RELEASE}",
         "-o", str(client)],
        check=True,
    )
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    log = open(work / "serve.log", "w")
    server = subprocess.Popen([str(RELEASE / "tcpls"), "serve", "--listen", addr], stderr=log)
    while "listening on" not in (work / "serve.log").read_text():
        time.sleep(0.05)
    results = {}
    try:
        for _ in range(args.rounds):
            for direction in ("upload", "download"):
                perf = [str(RELEASE / "tcpls"), "perf", addr, "--insecure", "--streams", str(args.streams),
                        "--bytes", args.bytes, "--json"] + (["--download"] if direction == "download" else [])
                out, cpu = cpu_of(perf)
                report = json.loads(out)
                assert report["verified"], report
                runs = results.setdefault(("tcpls perf", direction), [])
                runs.append((report["goodput_bps"] / 1e9, cpu))
                print(f"tcpls perf  {direction:8} {runs[-1][0]:6.2f} Gbit/s  {cpu:5.2f} CPU s", flush=True)
                c = [str(client), "--insecure", "--streams", str(args.streams), "--bytes", args.bytes,
                     "--mode", direction, "--json", addr]
                out, cpu = cpu_of(c)
                report = json.loads(out)
                assert report["verified"], report
                runs = results.setdefault(("C API", direction), [])
                runs.append((report["gbit_per_s"], cpu))
                print(f"C API       {direction:8} {runs[-1][0]:6.2f} Gbit/s  {cpu:5.2f} CPU s", flush=True)
    finally:
        server.terminate()
    print(f"\nmedians over {args.rounds} rounds, {args.bytes} over {args.streams} streams:")
    for direction in ("upload", "download"):
        perf = results[("tcpls perf", direction)]
        c = results[("C API", direction)]
        perf_g, c_g = statistics.median(g for g, _ in perf), statistics.median(g for g, _ in c)
        perf_cpu, c_cpu = statistics.median(u for _, u in perf), statistics.median(u for _, u in c)
        print(f"{direction:8} tcpls perf {perf_g:6.2f} Gbit/s ({perf_cpu:.2f} CPU s)   C API {c_g:6.2f} Gbit/s "
              f"({c_cpu:.2f} CPU s)   C / perf = {c_g / perf_g:.2f}")


if __name__ == "__main__":
    main()
