#!/usr/bin/env bash
# C API bulk goodput next to `tcpls perf`, same server, sizes and streams, runs interleaved:
#   tcpls-ffi/bench/compare.sh [ROUNDS] [BYTES] [STREAMS]
# Needs release builds: cargo build --release -p tcpls-cli -p tcpls-ffi. Prints one line per run:
# "who direction Gbit/s".
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3} bytes=${2:-2G} streams=${3:-4}
bin=$(mktemp -d)
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -pthread -Itcpls-ffi/include tcpls-ffi/examples/c/client.c \
    -Ltarget/release -ltcpls -Wl,-rpath,"$PWD/target/release" -o "$bin/tcpls-client"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
./target/release/tcpls serve --listen "127.0.0.1:$port" 2>"$bin/serve.log" &
server=$!
trap 'kill $server; rm -rf "$bin"' EXIT
until grep -q "listening on" "$bin/serve.log"; do sleep 0.1; done
for _ in $(seq "$rounds"); do
    for dir in upload download; do
        flag=(); [ "$dir" = download ] && flag=(--download)
        ./target/release/tcpls perf "127.0.0.1:$port" --insecure --streams "$streams" --bytes "$bytes" "${flag[@]}" --json \
            | python3 -c "import json,sys; r=json.load(sys.stdin); assert r['verified']; print('tcpls-perf', '$dir', round(r['goodput_bps']/1e9, 3))"
        "$bin/tcpls-client" --insecure --streams "$streams" --bytes "$bytes" --mode "$dir" --json "127.0.0.1:$port" \
            | python3 -c "import json,sys; r=json.load(sys.stdin); assert r['verified']; print('c-api', '$dir', r['gbit_per_s'])"
    done
done
