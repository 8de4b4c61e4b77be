#!/usr/bin/env bash
# Push-back against an independent limiter: nginx `limit_req` on 127.0.0.1, three limits
# (50 r/s burst 0, 50 r/s burst 10 nodelay, 5 r/s; 429 + `Retry-After: 1`), each run for
# DURATION seconds from WORKERS workers:
#   - the demo (release build) configured at twice the server's rate (`--rate 2R --burst 1`);
#   - the demo with `--adaptive` and no rate;
#   - botocore's adaptive `ClientRateLimiter` (benches/pushback/botocore_client.py).
# Prints a Markdown table, and writes every run's 2xx and 429 per 100 ms into one JSON file
# (OUT, path printed on stderr) that benches/pushback/plot.py draws; with `--svg PATH` it draws
# it there too. Needs nginx (`apt-get install -y nginx-light`) and
# `pip install botocore requests`.
#
#   bash benches/pushback/run.sh            # DURATION=20 WORKERS=16 PORT=18080
#   bash benches/pushback/run.sh --svg docs/pushback.svg
set -euo pipefail
cd "$(dirname "$0")/../.."
here=benches/pushback
DURATION=${DURATION:-20}
WORKERS=${WORKERS:-16}
PORT=${PORT:-18080}
OUT=${OUT:-${CARGO_TARGET_DIR:-target}/pushback.json}
svg=
case "${1:-}" in
    --svg) svg=${2:?--svg needs a path} ;;
    "") ;;
    *) echo "usage: run.sh [--svg PATH]" >&2 && exit 2 ;;
esac

prefix=$(mktemp -d)
chmod 755 "$prefix" && mkdir -p "$prefix/www" && echo ok >"$prefix/www/ok.txt"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$PORT|g" "$here/nginx.conf" >"$prefix/nginx.conf"
nginx -c "$prefix/nginx.conf" -p "$prefix"
trap 'kill "$(cat "$prefix/nginx.pid")" 2>/dev/null || true; rm -rf "$prefix"' EXIT

cargo build --quiet --release --example demo
demo="${CARGO_TARGET_DIR:-target}/release/examples/demo"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# row SERVER SERVER_RATE CLIENT_ID CLIENT COMMAND...: one run, one table row, one line of
# $prefix/runs.jsonl.
row() {
    local server=$1 rate=$2 id=$3 client=$4
    shift 4
    sleep 2 # let the server's limit recover from the previous run
    local json
    json=$("$@" | tail -n 1)
    python3 - "$server" "$rate" "$id" "$client" "$json" "$prefix/runs.jsonl" <<'PY'
import json, sys
server, rate, cid, client, j, runs = sys.argv[1:]
rate, j = float(rate), json.loads(j)
ok, r429, failed = j["ok"], j["status_429"], j["failed"]
ok_rps = ok / j["elapsed_s"]
share = 100.0 * r429 / max(1, ok + r429)
print(f"| {server} | {client} | {ok_rps:.1f} | {100 * ok_rps / rate:.0f} % | {share:.2f} % | {failed} |")
with open(runs, "a") as f:
    run = {"server": server, "server_rps": rate, "client_id": cid, "client": client}
    f.write(json.dumps(run | j) + "\n")
PY
}

echo "| server (nginx limit_req) | client | 200s per second | of the server's rate | share of 429s | lost |"
echo "|---|---|---:|---:|---:|---:|"
for spec in "r50b0 50 50 r/s, burst 0" "r50b10 50 50 r/s, burst 10" "r5 5 5 r/s"; do
    read -r path rate label <<<"$spec"
    url="http://127.0.0.1:$PORT/$path"
    row "$label" "$rate" configured "configured at $((2 * rate))/s" \
        "$demo" --url "$url" --rate $((2 * rate)) --burst 1 --concurrency "$WORKERS" \
        --duration "$DURATION" --json
    row "$label" "$rate" adaptive "adaptive, no rate" \
        "$demo" --url "$url" --adaptive --concurrency "$WORKERS" --duration "$DURATION" --json
    row "$label" "$rate" botocore "botocore adaptive" \
        python3 "$here/botocore_client.py" "$url" "$DURATION" "$WORKERS"
done

mkdir -p "$(dirname "$OUT")"
python3 - "$prefix/runs.jsonl" "$OUT" "$DURATION" "$WORKERS" "$load_before" <<'PY'
import json, platform, os, sys
runs, out, duration, workers, load_before = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
doc = {
    "duration_s": float(duration),
    "workers": int(workers),
    "machine": {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(),
                "load_before": load_before, "load_after": " ".join(open("/proc/loadavg").read().split()[:3])},
    "runs": [json.loads(l) for l in open(runs)],
}
json.dump(doc, open(out, "w"))
m = doc["machine"]
print(f"{out}: {m['cpu']}, {m['cores']} cores, load average {m['load_before']} before, {m['load_after']} after", file=sys.stderr)
PY
if [ -n "$svg" ]; then
    python3 "$here/plot.py" "$OUT" "$svg"
fi
