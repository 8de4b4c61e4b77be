#!/usr/bin/env bash
# Push-back against an independent limiter: nginx `limit_req` on 127.0.0.1, three limits
# (50 r/s burst 0, 50 r/s burst 10 nodelay, 5 r/s; 429 + `Retry-After: 1`), each run for
# DURATION seconds from WORKERS workers:
#   - the demo (release build) configured at twice the server's rate (`--rate 2R --burst 1`);
#   - the demo with `--adaptive` and no rate;
#   - botocore's adaptive `ClientRateLimiter` (benches/pushback/botocore_client.py).
# Prints a Markdown table. Needs nginx (`apt-get install -y nginx-light`) and
# `pip install botocore requests`.
#
#   bash benches/pushback/run.sh            # DURATION=20 WORKERS=16 PORT=18080
set -euo pipefail
cd "$(dirname "$0")/../.."
here=benches/pushback
DURATION=${DURATION:-20}
WORKERS=${WORKERS:-16}
PORT=${PORT:-18080}

prefix=$(mktemp -d)
chmod 755 "$prefix" && mkdir -p "$prefix/www" && echo ok >"$prefix/www/ok.txt"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$PORT|g" "$here/nginx.conf" >"$prefix/nginx.conf"
nginx -c "$prefix/nginx.conf" -p "$prefix"
trap 'kill "$(cat "$prefix/nginx.pid")" 2>/dev/null || true; rm -rf "$prefix"' EXIT

cargo build --quiet --release --example demo
demo="${CARGO_TARGET_DIR:-target}/release/examples/demo"

# run NAME SERVER_RATE COMMAND...: one run, one table row.
row() {
    local server=$1 rate=$2 client=$3
    shift 3
    sleep 2 # let the server's limit recover from the previous run
    local json
    json=$("$@" | tail -n 1)
    python3 - "$server" "$rate" "$client" "$json" <<'PY'
import json, sys
server, rate, client, j = sys.argv[1], float(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
ok, r429, failed = j["ok"], j["status_429"], j["failed"]
ok_rps = ok / j["elapsed_s"]
share = 100.0 * r429 / max(1, ok + r429)
print(f"| {server} | {client} | {ok_rps:.1f} | {100 * ok_rps / rate:.0f} % | {share:.2f} % | {failed} |")
PY
}

echo "| server (nginx limit_req) | client | 200s per second | of the server's rate | share of 429s | lost |"
echo "|---|---|---:|---:|---:|---:|"
for spec in "r50b0 50 50 r/s, burst 0" "r50b10 50 50 r/s, burst 10" "r5 5 5 r/s"; do
    read -r path rate label <<<"$spec"
    url="http://127.0.0.1:$PORT/$path"
    row "$label" "$rate" "configured at $((2 * rate))/s" \
        "$demo" --url "$url" --rate $((2 * rate)) --burst 1 --concurrency "$WORKERS" \
        --duration "$DURATION" --json
    row "$label" "$rate" "adaptive, no rate" \
        "$demo" --url "$url" --adaptive --concurrency "$WORKERS" --duration "$DURATION" --json
    row "$label" "$rate" "botocore adaptive" \
        python3 "$here/botocore_client.py" "$url" "$DURATION" "$WORKERS"
done
