#!/usr/bin/env python3
"""Interleaved A/B of `tcpls` CLI binaries with `tcpls perf` on a shared, noisy machine.

usage: ab_perf.py [--rounds N] [--bytes SIZE] [--dirs download,upload] [--nice N] [--rt] [--wrap CMD]
                  LABEL=BINARY ...
  e.g. tcpls-bench/scripts/ab_perf.py --rounds 5 old=/tmp/old-tcpls new=target/release/tcpls

Each round runs, per direction and per binary in turn (one transfer at a time), a fresh
`BINARY serve --mode perf` on a free loopback port and one `BINARY perf --DIRECTION --bytes SIZE
--json` against it, then stops the server (SIGINT) and takes the CPU time (user + system) of
both processes from the kernel (wait4). It prints per binary and direction the medians of:
goodput as perf reports it, goodput over the client's wall time (process start to exit),
server and client CPU seconds, CPU seconds per GiB of both ends, and the load average.

--nice N runs both processes at that nice value (root may give a negative one: on a machine
whose other jobs run at nice 10, -10 makes a run behave nearly as on a quiet machine).

--rt runs both processes under SCHED_FIFO priority 1 (root only; the kernel's RT throttling
still leaves 5 % to others): on a busy machine, the nearest thing to a quiet one. Use it for
short runs only, it takes the CPUs from everyone else while a transfer lasts.

--wrap CMD prefixes both processes' command lines (e.g. "perf stat -e instructions -x, -o
/tmp/x"): the CPU is then that of the wrapper and its child.
"""
import argparse
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not listen within 10 s")


def cpu_of(pid, grace=None):
    """Waits for pid; returns its user + system CPU seconds (children included by wait4).
    With `grace`, a process still running after that many seconds is killed (a server that
    waits for something after SIGINT); its CPU time so far still counts."""
    end = time.monotonic() + grace if grace else None
    while end is not None:
        done, status, ru = os.wait4(pid, os.WNOHANG)
        if done:
            return ru.ru_utime + ru.ru_stime, status
        if time.monotonic() >= end:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    _, status, ru = os.wait4(pid, 0)
    return ru.ru_utime + ru.ru_stime, status


def reported_goodput(report):
    """Receiver goodput (bit/s) from either perf JSON layout (summary[] or flat)."""
    for s in report.get("summary") or []:
        rx = s.get("receiver") or {}
        if rx.get("bits_per_second"):
            return rx["bits_per_second"]
    if report.get("goodput_bps"):
        return report["goodput_bps"]
    return report["bytes"] * 8 / report["seconds"]


def one_run(binary, cert, key, direction, size, wrap, niceness, rt):
    port = free_port()

    def renice():
        if niceness:
            os.nice(niceness)
        if rt:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))

    serve = wrap + [binary, "serve", "--mode", "perf", "--listen", f"127.0.0.1:{port}",
                    "--cert", cert, "--key", key]
    server = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=renice)
    try:
        wait_listening(port, server)
        t0 = time.monotonic()
        # stderr to a file: reading two pipes in turn could block on a full one.
        err_file = tempfile.TemporaryFile()
        client = subprocess.Popen(wrap + [binary, "perf", f"127.0.0.1:{port}", f"--{direction}",
                                          "--bytes", size, "--json", "--insecure"],
                                  stdout=subprocess.PIPE, stderr=err_file, preexec_fn=renice)
        out = client.stdout.read()
        client_cpu, status = cpu_of(client.pid)
        err_file.seek(0)
        err = err_file.read()
        wall = time.monotonic() - t0
        client.returncode = 0  # reaped by wait4
        if status != 0:
            raise RuntimeError(f"perf failed ({status}): {err.decode(errors='replace')[-500:]}")
    finally:
        server.send_signal(signal.SIGINT)
    server_cpu, _ = cpu_of(server.pid, grace=3.0)
    server.returncode = 0
    report = json.loads(out)
    nbytes = report.get("bytes") or sum(
        (s.get("receiver") or {}).get("bytes", 0) for s in report.get("summary") or [])
    verified = report.get("verified", True)
    if not verified:
        raise RuntimeError("perf says the payload was not verified")
    return {
        "gbps": reported_goodput(report) / 1e9,
        "wall_gbps": nbytes * 8 / wall / 1e9,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "cpu_per_gib": (server_cpu + client_cpu) / (nbytes / GIB),
        "load": os.getloadavg()[0],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", default="4G")
    ap.add_argument("--dirs", default="download")
    ap.add_argument("--wrap", default="")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--rt", action="store_true")
    ap.add_argument("variants", nargs="+", metavar="LABEL=BINARY")
    a = ap.parse_args()
    variants = [v.split("=", 1) for v in a.variants]
    wrap = shlex.split(a.wrap)
    certdir = tempfile.mkdtemp(prefix="ab_perf-")
    subprocess.run([variants[0][1], "cert", "--out", certdir], check=True, capture_output=True)
    cert, key = os.path.join(certdir, "cert.pem"), os.path.join(certdir, "key.pem")
    dirs = a.dirs.split(",")
    data = {}
    print(f"load at start: {os.getloadavg()}", file=sys.stderr)
    for r in range(a.rounds):
        for d in dirs:
            for label, binary in variants:
                res = one_run(binary, cert, key, d, a.bytes, wrap, a.nice, a.rt)
                data.setdefault((label, d), []).append(res)
                print(f"round {r + 1} {d:8} {label:12} {res['gbps']:6.2f} Gbit/s "
                      f"(wall {res['wall_gbps']:5.2f}) server {res['server_cpu']:5.2f} s "
                      f"client {res['client_cpu']:5.2f} s load {res['load']:.1f}",
                      file=sys.stderr, flush=True)
    keys = ["gbps", "wall_gbps", "server_cpu", "client_cpu", "cpu_per_gib", "load"]
    print(f"{'variant':14} {'dir':8} {'n':>3} {'Gbit/s':>7} {'wall':>6} {'srvCPU':>7} "
          f"{'cliCPU':>7} {'s/GiB':>6} {'load':>5}")
    for d in dirs:
        for label, _ in variants:
            rows = data.get((label, d), [])
            med = [statistics.median(x[k] for x in rows) for k in keys]
            print(f"{label:14} {d:8} {len(rows):3} {med[0]:7.2f} {med[1]:6.2f} {med[2]:7.2f} "
                  f"{med[3]:7.2f} {med[4]:6.3f} {med[5]:5.1f}")


if __name__ == "__main__":
    main()
