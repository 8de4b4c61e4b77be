#!/usr/bin/env bash
# Load check: put examples/axum_server under wrk on 127.0.0.1 and compare the rate admitted
# per API key with the configured one.
#
#   bash benches/load/run.sh
#   PER_KEY=500 KEYS=2 DURATION=30 bash benches/load/run.sh
#
# Each wrk thread sends as fast as it can with its own x-api-key, so every key is far over
# its limit and the server decides what gets through. The report per key: requests admitted
# (200) and refused (429), the admitted rate, and the admitted rate after the initial burst
# (one second's worth of tokens) against the configured rate. GLOBAL below KEYS x PER_KEY
# checks the global ceiling instead.
#
# Needs wrk (Debian: apt-get install -y wrk). All traffic stays on the loopback interface.
set -euo pipefail
cd "$(dirname "$0")/../.."

PER_KEY=${PER_KEY:-1000}   # requests per second per key; the burst is one second's worth
GLOBAL=${GLOBAL:-1000000}  # requests per second in all
KEYS=${KEYS:-4}            # one wrk thread per key
CONNS=${CONNS:-4}          # connections per key
DURATION=${DURATION:-20}   # seconds

command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }

cargo build --release --quiet --example axum_server
bin="${CARGO_TARGET_DIR:-target}/release/examples/axum_server"
log=$(mktemp)
"$bin" --addr 127.0.0.1:0 --per-key "$PER_KEY" --global "$GLOBAL" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT

for _ in $(seq 100); do
    grep -q listening "$log" && break
    sleep 0.1
done
url=$(grep -o 'http://[0-9.:]*' "$log") || { cat "$log" >&2; exit 1; }
echo "server: $(cat "$log")"
echo "wrk: $KEYS keys x $CONNS connections for ${DURATION}s"

wrk -t"$KEYS" -c"$((KEYS * CONNS))" -d"${DURATION}s" -s benches/load/per_key.lua "$url/" -- "$PER_KEY" "$GLOBAL"
