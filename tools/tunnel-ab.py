#!/usr/bin/env python3
"""Requests per second through `tcpls tunnel`, against the same requests sent directly.

usage: tools/tunnel-ab.py [--rounds N] [--requests N] [--concurrency N] [--size BYTES]
                          [--modes new,keepalive] [--nginx-workers N] [--no-reference]
                          [LABEL=[ENV=VALUE,...:]TCPLS_BINARY ...]

nginx serves one file of SIZE bytes (20 KB by default) on loopback, from a prefix and
configuration of its own in a temporary directory (ports chosen free). For each LABEL
(default: `tunnel=target/release/tcpls`) a `tcpls tunnel server` (concentrator,
--allow-dest 127.0.0.0/8) and a `tcpls tunnel client --forward PORT=NGINX` run on loopback.
ENV=VALUE is set for both tunnel processes, client.ENV=VALUE or server.ENV=VALUE for one
(e.g. client.TOKIO_WORKER_THREADS=2). Before the rounds, one GET through each tunnel is
checked byte for byte.

Each round runs `ab -n REQUESTS -c CONCURRENCY` (a new connection per request) and
`ab -k ...` (keep-alive), directly against nginx and through every variant, one at a time in
turn, so that every variant sees the same load. A reference row, `tcp-relay`, goes through
nginx's stream module (one more TCP connection per request and one more copy of the bytes, no
TLS, no multiplexing; its CPU in the client column): what a plain relay reaches here.

Printed per mode and variant: the median of requests/s over the rounds; the median over the
rounds of its ratio to the direct run of the same round (the load drifts between rounds); the
failed requests and non-2xx answers summed over all rounds (must be 0: the script fails
otherwise); the CPU seconds per 10 000 requests of the tunnel client, the concentrator, nginx
and ab (from /proc and getrusage, during the ab runs only); 'bound', the ratio the variant
would reach if the 2 cores were the only limit (direct nginx+ab CPU / the variant's total);
the load average at the start and end. Two builds side by side:
    tools/tunnel-ab.py before=/tmp/tcpls-before after=target/release/tcpls
"""
import argparse, os, re, resource, signal, socket, statistics, subprocess, sys, tempfile, time, urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of every thread of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu_seconds(pid):
    """CPU seconds of `pid` and of its descendants alive now (nginx's workers)."""
    total = cpu_seconds(pid)
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            total += sum(tree_cpu_seconds(int(c)) for c in f.read().split())
    return total


def children_cpu_seconds():
    """CPU seconds of this script's waited-for children (ab)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_for_line(proc, pattern, what, timeout=20.0, must=True):
    """Reads `proc`'s stderr until a line matches `pattern`; returns the match (None if `proc`
    ended first and not `must`)."""
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    if not must:
        return None
    sys.exit(f"{what} did not start: {''.join(lines)[-2000:]}")


class Nginx:
    def __init__(self, tmp, size, workers):
        self.root = os.path.join(tmp, "www")
        os.makedirs(os.path.join(tmp, "logs"))
        os.makedirs(self.root)
        # nginx started by root serves as `nobody`: the file and its directories must be readable.
        os.chmod(tmp, 0o755)
        os.chmod(self.root, 0o755)
        self.body = os.urandom(size)
        with open(os.path.join(self.root, "f.bin"), "wb") as f:
            f.write(self.body)
        os.chmod(os.path.join(self.root, "f.bin"), 0o644)
        for _ in range(20):
            self.port = free_port()
            conf = os.path.join(tmp, "nginx.conf")
            with open(conf, "w") as f:
                f.write(f"""worker_processes {workers};
pid {tmp}/nginx.pid;
error_log {tmp}/logs/error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        root {self.root};
    }}
}}
""")
            self.proc = subprocess.Popen(["nginx", "-p", tmp, "-c", conf, "-g", "daemon off;"],
                                         stderr=subprocess.PIPE, text=True)
            for _ in range(100):
                if self.proc.poll() is not None:
                    break  # the port was taken meanwhile: another one
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.05)
        sys.exit(f"nginx did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")

    def url(self, port=None):
        return f"http://127.0.0.1:{self.port if port is None else port}/f.bin"


class PlainRelay:
    """The reference: nginx's stream module relaying each connection to the web server over a
    TCP connection of its own (one extra connection and one extra copy of the bytes, no TLS,
    no multiplexing): what a mature relay without the tunnel's work costs."""

    def __init__(self, tmp, dest_port):
        self.label = "tcp-relay"
        prefix = os.path.join(tmp, "relay")
        os.makedirs(os.path.join(prefix, "logs"))
        for _ in range(20):
            self.port = free_port()
            conf = os.path.join(prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(f"""load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log;
events {{ worker_connections 4096; }}
stream {{
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        proxy_pass 127.0.0.1:{dest_port};
    }}
}}
""")
            self.proc = subprocess.Popen(["nginx", "-p", prefix, "-c", conf, "-g", "daemon off;"],
                                         stderr=subprocess.DEVNULL)
            for _ in range(100):
                if self.proc.poll() is not None:
                    break
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.05)
        sys.exit("nginx (stream relay) did not start")

    def cpu(self):
        return tree_cpu_seconds(self.proc.pid), 0.0

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Tunnel:
    def __init__(self, label, binary, env, dest_port, tmp):
        self.label = label
        self.server = subprocess.Popen(
            [binary, "tunnel", "server", "--listen", "127.0.0.1:0", "--allow-dest", "127.0.0.0/8"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env["server"])
        m = wait_for_line(self.server, r"listening on (\S+:\d+)", f"{label}: tunnel server")
        self.concentrator = concentrator = m.group(1)
        for _ in range(20):
            # The line names the address asked for: the port is chosen here (again if taken).
            self.port = free_port()
            self.client = subprocess.Popen(
                [binary, "tunnel", "client", "--concentrator", concentrator, "--insecure",
                 "--forward", f"127.0.0.1:{self.port}=127.0.0.1:{dest_port}"],
                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env["client"])
            if wait_for_line(self.client, r"accepting on", f"{label}: tunnel client", must=False):
                break
            self.client.wait()
        else:
            sys.exit(f"{label}: the tunnel client found no free port")
        # The logs go on being written: drain them so that the processes never block on a pipe.
        for p in (self.server, self.client):
            subprocess.Popen(["cat"], stdin=p.stderr, stdout=open(os.path.join(tmp, f"{label}-{p.pid}.log"), "w"))

    def cpu(self):
        return cpu_seconds(self.client.pid), cpu_seconds(self.server.pid)

    def stop(self):
        for p in (self.client, self.server):
            p.send_signal(signal.SIGTERM)
        for p in (self.client, self.server):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


def run_ab(url, requests, concurrency, keepalive):
    args = ["ab", "-q", "-n", str(requests), "-c", str(concurrency)] + (["-k"] if keepalive else []) + [url]
    out = subprocess.run(args, capture_output=True, text=True)
    text = out.stdout + out.stderr

    def field(name):
        m = re.search(rf"^{name}:\s+([\d.]+)", text, re.M)
        return float(m.group(1)) if m else None

    rps, failed, complete = field("Requests per second"), field("Failed requests"), field("Complete requests")
    if out.returncode != 0 or rps is None:
        sys.exit(f"ab failed on {url}: {text[-2000:]}")
    non2xx = field("Non-2xx responses") or 0
    return rps, int(failed) + int(non2xx), int(complete)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--size", type=int, default=20 * 1024)
    ap.add_argument("--modes", default="new,keepalive")
    ap.add_argument("--nginx-workers", type=int, default=1)
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="without the tcp-relay row (nginx's stream module relaying to the web server)")
    ap.add_argument("variants", nargs="*", default=["tunnel=target/release/tcpls"])
    a = ap.parse_args()
    modes = a.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="tunnel-ab-") as tmp:
        nginx = Nginx(tmp, a.size, a.nginx_workers)
        tunnels = []
        try:
            if a.reference:
                tunnels.append(PlainRelay(tmp, nginx.port))
            for v in a.variants:
                label, rest = v.split("=", 1)
                envs, binary = rest.rsplit(":", 1) if ":" in rest else ("", rest)
                env = {"client": dict(os.environ), "server": dict(os.environ)}
                for kv in filter(None, envs.split(",")):
                    k, val = kv.split("=", 1)
                    role, _, name = k.rpartition(".")
                    for r in [role] if role else ["client", "server"]:
                        env[r][name] = val
                tunnels.append(Tunnel(label, binary, env, nginx.port, tmp))
            for t in [None] + tunnels:
                got = urllib.request.urlopen(nginx.url(t.port) if t else nginx.url(), timeout=10).read()
                if got != nginx.body:
                    sys.exit(f"{t.label if t else 'direct'}: the file arrived altered ({len(got)} bytes)")
            load_start = os.getloadavg()
            results = {}  # (mode, label) -> list of (rps, failed, client cpu/10k, server cpu/10k)
            for r in range(a.rounds):
                for mode in modes:
                    for t in [None] + tunnels:
                        label = t.label if t else "direct"
                        def cpu():
                            return (*(t.cpu() if t else (0.0, 0.0)), tree_cpu_seconds(nginx.proc.pid),
                                    children_cpu_seconds())
                        before = cpu()
                        rps, failed, done = run_ab(nginx.url(t.port) if t else nginx.url(), a.requests, a.concurrency,
                                                   mode == "keepalive")
                        after = cpu()
                        per10k = [(x - y) * 10000 / max(done, 1) for x, y in zip(after, before)]
                        results.setdefault((mode, label), []).append((rps, failed, *per10k))
                        print(f"round {r + 1} {mode:9} {label:10} {rps:9.0f} req/s  failed {failed}", file=sys.stderr,
                              flush=True)
            load_end = os.getloadavg()
        finally:
            for t in tunnels:
                t.stop()
            nginx.proc.terminate()
            nginx.proc.wait()
    print(f"ab -n {a.requests} -c {a.concurrency}, {a.size} B file, {a.rounds} rounds, nginx {a.nginx_workers} "
          f"worker(s); load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end")
    print("CPU seconds per 10k requests: of the tunnel client, the concentrator, nginx and ab; 'bound': the "
          "ratio if the 2 cores were the limit (direct nginx+ab CPU / this variant's total)")
    print(f"{'mode':10} {'variant':10} {'req/s':>9} {'ratio':>6} {'failed':>6} {'client':>7} {'server':>7} "
          f"{'nginx':>7} {'ab':>7} {'bound':>6}")
    for mode in modes:
        direct_cpu = statistics.median(x[4] + x[5] for x in results[(mode, "direct")])
        for label in ["direct"] + [t.label for t in tunnels]:
            d = results[(mode, label)]
            med = statistics.median(x[0] for x in d)
            # Each round's ratio to the direct run of the same round (the load drifts between
            # rounds), then their median.
            ratio = statistics.median(x[0] / y[0] for x, y in zip(d, results[(mode, "direct")]))
            fails = sum(x[1] for x in d)
            cpu = [statistics.median(x[i] for x in d) for i in (2, 3, 4, 5)]
            total = statistics.median(sum(x[2:6]) for x in d)
            print(f"{mode:10} {label:10} {med:9.0f} {ratio:6.2f} {fails:6d} " +
                  " ".join(f"{c:7.3f}" for c in cpu) + f" {direct_cpu / total:6.2f}")
    if any(x[1] for d in results.values() for x in d):
        sys.exit("some requests failed")


if __name__ == "__main__":
    main()
