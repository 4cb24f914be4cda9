#!/usr/bin/env bash
# Instructions per received byte of TCPLS' receive path, zero-copy vs copying, under callgrind.
#
#   tcpls-bench/scripts/recv-cpu.sh            # 64 MiB per run, table
#   tcpls-bench/scripts/recv-cpu.sh --json     # one JSON object
#   BYTES=16M REPS=3 tcpls-bench/scripts/recv-cpu.sh
#
# Runs `tcpls-bench recv-cpu --zero-copy on|off` under `valgrind --tool=callgrind`, collecting
# only inside the functions `recv_cpu::measured_*` (the client's handle_read + events,
# recv_chunk, consume); sealing by the server, the copy into the read buffer (the kernel's
# job in a real process) and the content check are not counted. See tcpls-bench/src/recv_cpu.rs
# and tcpls-bench/README.md.
#
# Two memcpy variants, because callgrind counts `rep movsb` once per byte moved: glibc's
# default memcpy uses `rep movsb` for the sizes copied here (ERMS), so a copy counts ~1
# instruction per byte, although the CPU moves tens of bytes per cycle with it. With
# GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=max, glibc copies with its AVX loop instead
# (~0.1 instruction per byte), which tracks the work of a copy better. Both are reported.
# Then REPS (default 5) native runs of each path, alternating, give the median wall-clock time
# per byte in the measured functions.
set -euo pipefail

BYTES=${BYTES:-64M}
REPS=${REPS:-5}
JSON=0
[[ "${1:-}" == "--json" ]] && JSON=1

root=$(cd "$(dirname "$0")/../.." && pwd)
command -v valgrind >/dev/null || { echo "recv-cpu.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cargo build --release -q -p tcpls-bench --manifest-path "$root/Cargo.toml"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# A private copy: a rebuild by someone else during the runs cannot change what is measured.
bin="$out/tcpls-bench"
cp "$root/target/release/tcpls-bench" "$bin"

# Total collected instructions (Ir) of a callgrind output file.
instructions() {
    awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

declare -A ir
for memcpy in default vector; do
    tunables=""
    [[ $memcpy == vector ]] && tunables="glibc.cpu.x86_rep_movsb_threshold=4294967295"
    for mode in on off; do
        tag="$memcpy.$mode"
        GLIBC_TUNABLES=$tunables valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$tag" \
            --collect-atstart=no --toggle-collect='*recv_cpu*measured_*' \
            "$bin" recv-cpu --zero-copy "$mode" --bytes "$BYTES" --json >"$out/report.$tag" 2>"$out/valgrind.$tag" || {
            cat "$out/valgrind.$tag" >&2
            exit 1
        }
        ir[$tag]=$(instructions "$out/callgrind.$tag")
        echo "callgrind $memcpy memcpy, zero-copy $mode: ${ir[$tag]} instructions" >&2
    done
done

for i in $(seq 1 "$REPS"); do
    for mode in on off; do
        "$bin" recv-cpu --zero-copy "$mode" --bytes "$BYTES" --json | tr -d '\n' >>"$out/native.$mode"
        echo >>"$out/native.$mode"
    done
done

python3 - "$out" "$JSON" "${ir[default.on]}" "${ir[default.off]}" "${ir[vector.on]}" "${ir[vector.off]}" <<'PY'
import json, statistics, sys
out, as_json = sys.argv[1], sys.argv[2] == "1"
ir = dict(zip(["default.on", "default.off", "vector.on", "vector.off"], map(int, sys.argv[3:7])))
reports = {tag: json.load(open(f"{out}/report.{tag}")) for tag in ir}
native = {m: [json.loads(l) for l in open(f"{out}/native.{m}") if l.strip()] for m in ("on", "off")}
for r in list(reports.values()) + native["on"] + native["off"]:
    if not r["verified"]:
        sys.exit("recv-cpu.sh: a run did not verify its bytes")
nbytes = reports["default.on"]["bytes"]
res = {"bytes": nbytes, "callgrind": {}, "native_ns_per_byte": {}}
for memcpy in ("default", "vector"):
    on, off = ir[f"{memcpy}.on"], ir[f"{memcpy}.off"]
    res["callgrind"][memcpy + "_memcpy"] = {
        "zero_copy_on": {"instructions": on, "instructions_per_byte": on / nbytes,
                         "zero_copy_bytes": reports[f"{memcpy}.on"]["zero_copy_bytes"],
                         "copied_bytes": reports[f"{memcpy}.on"]["copied_bytes"]},
        "zero_copy_off": {"instructions": off, "instructions_per_byte": off / nbytes,
                          "zero_copy_bytes": reports[f"{memcpy}.off"]["zero_copy_bytes"],
                          "copied_bytes": reports[f"{memcpy}.off"]["copied_bytes"]},
        "ratio_on_to_off": on / off,
        "reduction_percent": 100.0 * (1 - on / off),
    }
for m in ("on", "off"):
    res["native_ns_per_byte"][m] = statistics.median(r["ns_per_byte"] for r in native[m])
res["native_ns_per_byte"]["ratio_on_to_off"] = res["native_ns_per_byte"]["on"] / res["native_ns_per_byte"]["off"]
res["native_reps"] = len(native["on"])
if as_json:
    print(json.dumps(res, indent=2))
    sys.exit(0)
print(f"receive path, {nbytes} stream bytes; callgrind instructions in recv_cpu::measured_*")
print(f"{'memcpy':<8} {'zero-copy':<10} {'instructions':>14} {'instr/byte':>11} {'zero_copy_bytes':>16} {'copied_bytes':>13}")
for memcpy in ("default", "vector"):
    c = res["callgrind"][memcpy + "_memcpy"]
    for m in ("on", "off"):
        r = c[f"zero_copy_{m}"]
        print(f"{memcpy:<8} {m:<10} {r['instructions']:>14} {r['instructions_per_byte']:>11.4f} {r['zero_copy_bytes']:>16} {r['copied_bytes']:>13}")
    print(f"{'':<8} on/off = {c['ratio_on_to_off']:.3f} ({c['reduction_percent']:.1f}% fewer instructions per byte with zero-copy; goal >= 25%)")
n = res["native_ns_per_byte"]
print(f"native wall clock in the measured functions, median of {res['native_reps']}: on {n['on']:.4f} ns/byte, off {n['off']:.4f} ns/byte, on/off = {n['ratio_on_to_off']:.3f}")
print("default memcpy: glibc's rep movsb, which callgrind counts once per byte; vector: AVX loop (GLIBC_TUNABLES)")
PY
