#!/usr/bin/env bash
# Every "performance at scale" goal (docs/PERFORMANCE.md), each measured next to its baseline in the
# same run, RUNS times (default 3), and one table of the same-run ratios against the goals.
#
#   tcpls-bench/scripts/scale_goals.sh                  # release build, 3 runs, table on stdout
#   RUNS=1 QUICK=1 tcpls-bench/scripts/scale_goals.sh   # smoke test: small transfers, 500 sessions
#   OUT=/tmp/scale tcpls-bench/scripts/scale_goals.sh     # keep every run's JSON in /tmp/scale
#   BENCH=/path/tcpls-bench TUNNEL_BENCH=/path/tunnel_bench tcpls-bench/scripts/scale_goals.sh
#                                                   # an older build, for before/after
#
# One run is, in this order (each program alternates or interleaves its own protocols):
#   tcpls-bench compare --protos tcp,tcpls,tcpls-64 --bytes 2G --reps 3   rows 64 streams, RSS 64,
#                                                                         CPU vs raw TCP
#   tcpls-bench compare --protos tcpls,tcpls-1000 --bytes 1G --reps 3    rows 1000 streams, RSS 1000
#   tcpls-bench scale --handshakes 500 --reps 3                           handshake CPU, TTFB,
#                                                                         bytes per idle session
#   tunnel_bench --part goodput --bytes 1G --runs 3                       tunnel vs direct TCPLS
# and `uptime` before each, because this is a shared machine: compare ratios, not absolutes.
# Sessions: `scale` without --sessions holds as many as the open-file limit allows (it raises
# RLIMIT_NOFILE as far as the hard limit lets it) and says so (tcpls-bench/README.md, "scale").
#
# The "sender" in `compare` is the client; in the issue's downloads the server sends, so the
# "server peak RSS" rows read the sending process's peak RSS.
set -euo pipefail

RUNS=${RUNS:-3}
QUICK=${QUICK:-0}
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/scale_goals.XXXXXX)}
mkdir -p "$OUT"

if [[ -z "${BENCH:-}" || -z "${TUNNEL_BENCH:-}" ]]; then
    cargo build --release -q -p tcpls-bench --manifest-path "$root/Cargo.toml"
    cargo build --release -q -p tcpls-tunnel --example tunnel_bench --manifest-path "$root/Cargo.toml"
fi
BENCH=${BENCH:-$root/target/release/tcpls-bench}
TUNNEL_BENCH=${TUNNEL_BENCH:-$root/target/release/examples/tunnel_bench}
command -v python3 >/dev/null || { echo "scale_goals.sh: python3 is needed for the table (apt-get install python3)" >&2; exit 2; }

if [[ "$QUICK" == 1 ]]; then
    BIG=256M SMALL=128M SESSIONS=(--sessions 500) HANDSHAKES=50 TUNNEL_BYTES=128M
else
    # No --sessions: as many as the open-file limit allows (19 744 with this machine's 20 000).
    BIG=2G SMALL=1G SESSIONS=() HANDSHAKES=500 TUNNEL_BYTES=1G
fi

load=$(cut -d' ' -f1 /proc/loadavg)
if python3 -c "import sys; sys.exit(0 if float('$load') > 0.5 else 1)"; then
    echo "scale_goals.sh: the load average is $load: other programs are running. Ratios within a run stay" >&2
    echo "  comparable, but on loopback the kernel's receive work runs partly in whatever context is" >&2
    echo "  on the CPU (softirq), so CPU per GiB of a process reads low under load, raw TCP's most." >&2
fi

for run in $(seq 1 "$RUNS"); do
    echo "scale_goals.sh: run $run of $RUNS -> $OUT" >&2
    uptime > "$OUT/run$run.uptime"
    "$BENCH" compare --protos tcp,tcpls,tcpls-64 --bytes "$BIG" --reps 3 --json > "$OUT/run$run.streams64.json"
    uptime >> "$OUT/run$run.uptime"
    "$BENCH" compare --protos tcpls,tcpls-1000 --bytes "$SMALL" --reps 3 --json > "$OUT/run$run.streams1000.json"
    uptime >> "$OUT/run$run.uptime"
    "$BENCH" scale "${SESSIONS[@]}" --handshakes "$HANDSHAKES" --reps 3 --json > "$OUT/run$run.scale.json"
    uptime >> "$OUT/run$run.uptime"
    "$TUNNEL_BENCH" --part goodput --bytes "$TUNNEL_BYTES" --runs 3 --json > "$OUT/run$run.tunnel.json"
done

python3 - "$OUT" "$RUNS" <<'EOF'
import json, sys

out, runs = sys.argv[1], int(sys.argv[2])

def load(run, name):
    with open(f"{out}/run{run}.{name}.json") as f:
        return json.load(f)

def proto(doc, name):
    return next(r for r in doc["results"] if r["protocol"] == name)

# (row, goal text, test of the goal, function of one run's documents -> value)
ROWS = [
    ("64 streams vs 1 stream, goodput", ">= 0.95x", lambda v: v >= 0.95,
     lambda d: proto(d["s64"], "tcpls-64")["median_gbit_s"] / proto(d["s64"], "tcpls")["median_gbit_s"]),
    ("64 streams vs 1 stream, CPU/GiB", "<= 1.1x", lambda v: v <= 1.1,
     lambda d: proto(d["s64"], "tcpls-64")["cpu_s_per_gib"]["total"] / proto(d["s64"], "tcpls")["cpu_s_per_gib"]["total"]),
    ("1000 streams vs 1 stream, goodput", ">= 0.85x", lambda v: v >= 0.85,
     lambda d: proto(d["s1000"], "tcpls-1000")["median_gbit_s"] / proto(d["s1000"], "tcpls")["median_gbit_s"]),
    ("1000 streams vs 1 stream, CPU/GiB", "<= 1.3x", lambda v: v <= 1.3,
     lambda d: proto(d["s1000"], "tcpls-1000")["cpu_s_per_gib"]["total"] / proto(d["s1000"], "tcpls")["cpu_s_per_gib"]["total"]),
    ("sender peak RSS, 1000 streams (MiB)", "<= 64", lambda v: v <= 64,
     lambda d: proto(d["s1000"], "tcpls-1000")["sender_peak_rss_mib"]),
    ("sender peak RSS, 64 streams (MiB)", "<= 64", lambda v: v <= 64,
     lambda d: proto(d["s64"], "tcpls-64")["sender_peak_rss_mib"]),
    ("server CPU per handshake vs TLS", "<= 1.05x", lambda v: v <= 1.05,
     lambda d: d["scale"]["tcpls_to_tls"]["server_cpu_per_handshake"]),
    ("time to first byte vs TLS", "<= 1.05x", lambda v: v <= 1.05,
     lambda d: d["scale"]["tcpls_to_tls"]["ttfb_median"]),
    ("server bytes per idle session (RSS)", "<= 16384", lambda v: v <= 16384,
     lambda d: proto(d["scale"], "tcpls")["server_rss_bytes_per_idle_session"]),
    ("client bytes per idle session (RSS)", "<= 16384", lambda v: v <= 16384,
     lambda d: proto(d["scale"], "tcpls")["client_rss_bytes_per_idle_session"]),
    ("server heap bytes per idle session", "<= 16384", lambda v: v <= 16384,
     lambda d: proto(d["scale"], "tcpls")["server_heap_bytes_per_idle_session"]),
    ("client heap bytes per idle session", "<= 16384", lambda v: v <= 16384,
     lambda d: proto(d["scale"], "tcpls")["client_heap_bytes_per_idle_session"]),
    ("tunnel goodput vs direct TCPLS", ">= 0.7", lambda v: v >= 0.7,
     lambda d: d["tunnel"]["tunnel_vs_tcpls"]),
    ("CPU per GiB vs raw TCP (both ends)", "<= 1.15x", lambda v: v <= 1.15,
     lambda d: proto(d["s64"], "tcpls")["cpu_s_per_gib"]["total"] / proto(d["s64"], "tcp")["cpu_s_per_gib"]["total"]),
]

docs = []
for run in range(1, runs + 1):
    docs.append({
        "s64": load(run, "streams64"),
        "s1000": load(run, "streams1000"),
        "scale": load(run, "scale"),
        "tunnel": load(run, "tunnel"),
    })

def fmt(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"

print(f"Scale goals, {runs} run(s), JSON in {out}")
print()
print("| row | " + " | ".join(f"run {i}" for i in range(1, runs + 1)) + " | goal | met in |")
print("|---|" + "---:|" * runs + "---|---|")
for name, goal, ok, value in ROWS:
    values = [value(d) for d in docs]
    met = sum(1 for v in values if ok(v))
    print(f"| {name} | " + " | ".join(fmt(v) for v in values) + f" | {goal} | {met} of {runs} |")
print()
for i, d in enumerate(docs, 1):
    s = d["scale"]
    held = [(r["protocol"], r["sessions_open_at_server"], r["sessions_alive"], r["sessions"]) for r in s["results"]]
    print(f"run {i}: open-file limit {s['sessions_fd_limit']}; sessions held/alive/opened " + ", ".join(f"{p} {h}/{a}/{n}" for p, h, a, n in held)
          + f"; tcpls {proto(d['s64'], 'tcpls')['median_gbit_s']:.1f} Gbit/s, tcp {proto(d['s64'], 'tcp')['median_gbit_s']:.1f},"
          + f" tcpls-64 {proto(d['s64'], 'tcpls-64')['median_gbit_s']:.1f}, tcpls-1000 {proto(d['s1000'], 'tcpls-1000')['median_gbit_s']:.1f},"
          + f" tunnel {d['tunnel']['goodput_gbps']['tunnel']:.1f}")
    with open(f"{out}/run{i}.uptime") as f:
        print("  load: " + "; ".join(line.split("load average:")[-1].strip() for line in f))
EOF
