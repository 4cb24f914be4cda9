#!/usr/bin/env bash
# Goodput of `tcpls tunnel` through shaped links (docs/TUNNEL.md §8), against plain TCP on the
# same links: `tcpls-netem up` builds a client and a server namespace joined by two disjoint
# emulated paths (RATE Mbit/s each way, DELAY ms one-way); python3's http.server and the
# concentrator run in the server namespace, curl and the tunnel client in the client namespace.
# Every download is checked by SHA-256. Needs root, /dev/net/tun, iproute2, curl, python3.
#   sudo tools/tunnel-shaped-goodput.sh [BIN_DIR] [RATE] [DELAY] [SIZE_MB]
# BIN_DIR holds `tcpls` and `tcpls-netem` (default target/release).
set -euo pipefail
BIN_DIR=${1:-target/release}
RATE=${2:-50}
DELAY=${3:-10}
SIZE_MB=${4:-32}
DIR=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
"$BIN_DIR/tcpls-netem" up --paths 2 --delay "$DELAY" --rate "$RATE" >"$DIR/netem.txt" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q "^running" "$DIR/netem.txt" && break; sleep 0.2; done
P=$(awk '/^topology/ { print $2 }' "$DIR/netem.txt")
C="ip netns exec $P-c" S="ip netns exec $P-s"
head -c "$((SIZE_MB << 20))" /dev/urandom > "$DIR/f.bin"
head -c "$((SIZE_MB << 20))" /dev/urandom > "$DIR/g.bin"
$S python3 -m http.server 8000 --bind 0.0.0.0 --directory "$DIR" >/dev/null 2>&1 &
pids+=($!)
$S "$BIN_DIR/tcpls" tunnel server --listen 10.1.2.2:4443 --listen 10.2.2.2:4443 --allow-dest 127.0.0.0/8 2>"$DIR/server.log" &
pids+=($!)
sleep 1
$C "$BIN_DIR/tcpls" tunnel client --concentrator 10.1.2.2:4443 --insecure --socks 127.0.0.1:1080 2>"$DIR/c1.log" &
pids+=($!)
$C "$BIN_DIR/tcpls" tunnel client --concentrator 10.1.2.2:4443 --path 10.2.2.2:4443 --insecure \
    --socks 127.0.0.1:1081 2>"$DIR/c2.log" &
pids+=($!)
sleep 1
check() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$(sha256sum "$DIR/$2" | cut -d' ' -f1)" ] || { echo "$1: content differs" >&2; exit 1; }; }
one() { # label, file, curl arguments...: one download, its goodput
    local label=$1 f=$2; shift 2
    local bps
    bps=$($C curl -sS --fail -o "$DIR/out" -w '%{speed_download}' "$@")
    check "$DIR/out" "$f"
    awk -v b="$bps" -v l="$label" 'BEGIN { printf "%-44s %7.1f Mbit/s\n", l, b * 8 / 1e6 }'
}
two() { # label, url prefix, curl arguments...: two downloads at once, their total goodput
    local label=$1 url=$2; shift 2
    local t0 t1
    t0=$(date +%s.%N)
    $C curl -sS --fail -o "$DIR/o1" "$@" "$url/f.bin" &
    local a=$!
    $C curl -sS --fail -o "$DIR/o2" "$@" "$url/g.bin" &
    local b=$!
    wait $a
    wait $b
    t1=$(date +%s.%N)
    check "$DIR/o1" f.bin
    check "$DIR/o2" g.bin
    awk -v s="$SIZE_MB" -v t0="$t0" -v t1="$t1" -v l="$label" \
        'BEGIN { printf "%-44s %7.1f Mbit/s\n", l, 2 * s * 8 * 1048576 / (t1 - t0) / 1e6 }'
}
echo "links: 2 paths, $RATE Mbit/s each way, $DELAY ms one-way delay; ${SIZE_MB} MiB per download"
for i in 1 2; do
    one "plain TCP, path 0 (run $i)" f.bin "http://10.1.2.2:8000/f.bin"
    one "tunnel, 1 path (run $i)" f.bin --socks5-hostname 127.0.0.1:1080 "http://127.0.0.1:8000/f.bin"
    one "tunnel, 2 paths, 1 download (run $i)" f.bin --socks5-hostname 127.0.0.1:1081 "http://127.0.0.1:8000/f.bin"
    two "tunnel, 2 paths, 2 downloads (run $i)" "http://127.0.0.1:8000" --socks5-hostname 127.0.0.1:1081
done
