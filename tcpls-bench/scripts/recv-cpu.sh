#!/usr/bin/env bash
# Instructions per received byte of TCPLS' receive path, zero-copy vs copying, under callgrind.
#
#   tcpls-bench/scripts/recv-cpu.sh            # 64 MiB each way, table
#   tcpls-bench/scripts/recv-cpu.sh --json     # one JSON object
#   BYTES=16M tcpls-bench/scripts/recv-cpu.sh
#
# Runs `tcpls-bench recv-cpu --zero-copy on|off` under `valgrind --tool=callgrind`, collecting
# only inside the functions `recv_cpu::measured_*` (the client's handle_read + events,
# recv_chunk, consume); sealing by the server, the copy into the read buffer (the kernel's
# job in a real process) and the content check are not counted. See tcpls-bench/src/recv_cpu.rs
# and tcpls-bench/README.md.
set -euo pipefail

BYTES=${BYTES:-64M}
JSON=0
[[ "${1:-}" == "--json" ]] && JSON=1

root=$(cd "$(dirname "$0")/../.." && pwd)
command -v valgrind >/dev/null || { echo "recv-cpu.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cargo build --release -q -p tcpls-bench --manifest-path "$root/Cargo.toml"
bin="$root/target/release/tcpls-bench"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Total collected instructions (Ir) of a callgrind output file.
instructions() {
    awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

declare -A ir report
for mode in on off; do
    valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$mode" \
        --collect-atstart=no \
        --toggle-collect='*recv_cpu*measured_*' \
        "$bin" recv-cpu --zero-copy "$mode" --bytes "$BYTES" --json >"$out/report.$mode" 2>"$out/valgrind.$mode" || {
        cat "$out/valgrind.$mode" >&2
        exit 1
    }
    ir[$mode]=$(instructions "$out/callgrind.$mode")
    report[$mode]=$(tr -d '\n' <"$out/report.$mode")
done

bytes=$(sed -n 's/.*"bytes": *\([0-9]*\).*/\1/p' "$out/report.on" | head -1)
python3 - "$bytes" "${ir[on]}" "${ir[off]}" "$JSON" "${report[on]}" "${report[off]}" <<'PY'
import json, sys
bytes_, ir_on, ir_off, as_json = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
on, off = json.loads(sys.argv[5]), json.loads(sys.argv[6])
for r in (on, off):
    if not r["verified"]:
        sys.exit("recv-cpu.sh: a run did not verify its bytes")
res = {
    "bytes": bytes_,
    "zero_copy_on": {"instructions": ir_on, "instructions_per_byte": ir_on / bytes_,
                     "zero_copy_bytes": on["zero_copy_bytes"], "copied_bytes": on["copied_bytes"]},
    "zero_copy_off": {"instructions": ir_off, "instructions_per_byte": ir_off / bytes_,
                      "zero_copy_bytes": off["zero_copy_bytes"], "copied_bytes": off["copied_bytes"]},
    "ratio_on_to_off": ir_on / ir_off,
    "reduction_percent": 100.0 * (1 - ir_on / ir_off),
}
if as_json:
    print(json.dumps(res, indent=2))
else:
    print(f"receive path, {bytes_} stream bytes, instructions counted by callgrind in recv_cpu::measured_*")
    print(f"{'zero-copy':<10} {'instructions':>14} {'instr/byte':>11} {'zero_copy_bytes':>16} {'copied_bytes':>13}")
    for name, r, src in (("on", res["zero_copy_on"], on), ("off", res["zero_copy_off"], off)):
        print(f"{name:<10} {r['instructions']:>14} {r['instructions_per_byte']:>11.4f} {src['zero_copy_bytes']:>16} {src['copied_bytes']:>13}")
    print(f"on/off = {res['ratio_on_to_off']:.3f} ({res['reduction_percent']:.1f}% fewer instructions per byte with zero-copy; goal >= 25%)")
PY
