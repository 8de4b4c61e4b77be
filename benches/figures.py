#!/usr/bin/env python3
"""Every benchmark figure docs/benchmarks.md quotes, measured RUNS times (default 3), ours and the
peers in the same run, printed with the value of each run and the spread.

  python3 benches/figures.py               # 3 runs, about 10 minutes on 2 cores
  RUNS=1 python3 benches/figures.py        # one run
  python3 benches/figures.py --no-redis    # without the Redis backend's figures

Each run runs `cargo bench` for bucket and keyed (`--features quanta`, for the TSC rows),
algorithms and accuracy (default features) and redis (`--features redis`, against
TOWER_THROTTLE_REDIS_URL, default redis://127.0.0.1:6379), with short criterion settings
(`--warm-up-time 1 --measurement-time 2`). Criterion figures are its point estimate (the
slope of the linear fit, else the mean), per operation. Ratios are taken within each run,
so that ours and the peer always share the machine's state; the spread of a ratio over the
runs is the honest figure on a shared machine. The load test (`benches/load/run.sh`, wrk)
is not part of it.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
SHORT = ["--", "--warm-up-time", "1", "--measurement-time", "2"]


def bench(name, features=(), criterion=True):
    cmd = ["cargo", "bench", "--quiet", "--bench", name]
    if features:
        cmd += ["--features", ",".join(features)]
    if criterion:
        cmd += SHORT
    print("  $", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def estimate(path):
    """Criterion's point estimate for `group/function[/input]`, in ns."""
    est = json.loads((TARGET / "criterion" / path / "new" / "estimates.json").read_text())
    return (est.get("slope") or est["mean"])["point_estimate"]


def one_run(redis):
    f = {}
    # bucket: one decision, clock reads, two threads, a service call.
    bench("bucket", ["quanta"])
    for key in [
        "single_thread/ours_try_acquire", "single_thread/ours_try_acquire_tsc_clock",
        "single_thread/governor_check", "clock_read/tokio_Instant_now",
        "clock_read/governor_QuantaClock_now", "two_threads/ours_try_acquire",
        "two_threads/ours_try_acquire_tsc_clock", "two_threads/governor_check",
        "service_ready_call/ours_RateLimit_clone",
        "service_ready_call/ours_RateLimit_clone_tsc_clock",
        "service_ready_call/tower_RateLimit", "service_ready_call/tower_Buffer_RateLimit",
    ]:
        f[key] = estimate(key)
    # keyed: a check at 1, 1,000 and 100,000 keys; memory per key.
    out = bench("keyed", ["quanta"])
    for who in ["ours", "ours_tsc_clock", "governor"]:
        for n in [1, 1000, 100000]:
            f[f"keyed_check/{who}/{n}"] = estimate(f"keyed_check/{who}/{n}")
        key = f"keyed_two_threads_one_key/{who}"
        f[key] = estimate(key)
    for who in ["ours", "governor"]:
        m = re.search(rf"^\s*{who}\s+([\d.]+) B/key measured", out, re.M)
        f[f"memory/{who}"] = float(m.group(1)) if m else None
    # algorithms: each next to the token bucket (alone, and per key).
    bench("algorithms")
    for group in ["try_acquire_by_algorithm", "keyed_try_acquire_by_algorithm"]:
        for name in ["token_bucket", "leaky_bucket", "fixed_window", "sliding_window",
                     "sliding_log", "governor_check", "governor_check_key"]:
            p = TARGET / "criterion" / group / name
            if p.exists():
                f[f"{group}/{name}"] = estimate(f"{group}/{name}")
    # accuracy: 200 tasks on 1000/s for 3 s, on a quiet machine (the first of its tables).
    out = bench("accuracy", criterion=False).split("### loaded")[0]
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[1].isdigit():
            f[f"accuracy/{cells[0]}"] = {
                "admitted": int(cells[1]), "ratio": float(cells[2]), "max100": int(cells[3]),
                "wakeups": float(cells[5]), "cpu_ms": float(cells[7]),
            }
    if redis:
        out = bench("redis", ["redis"], criterion=False)
        grab = lambda pat: (lambda m: float(m.group(1)) if m else None)(re.search(pat, out))
        f["redis/decision_per_ping_mean"] = grab(r"decision / PING: ([\d.]+)× \(mean\)")
        f["redis/decision_per_ping_p50"] = grab(r"decision / PING: [\d.]+× \(mean\), ([\d.]+)×")
        f["redis/decision_per_floor"] = grab(r"decision / floor script: ([\d.]+)× \(mean\)")
        f["redis/decisions_per_s"] = grab(r"RedisBucket::try_acquire\s+([\d.]+) decisions/s")
        f["redis/evalsha_per_s"] = grab(r"EVALSHA \(the decision script, one key\):.*?([\d.]+) requests per second")
    return f


def spread(values, fmt):
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a", "n/a"
    runs = " / ".join(fmt(v) for v in values if v is not None)
    lo, hi = min(vals), max(vals)
    return runs, fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def main():
    runs = int(os.environ.get("RUNS", "3"))
    redis = "--no-redis" not in sys.argv
    results = []
    loads = []
    for i in range(runs):
        print(f"run {i + 1} of {runs}", file=sys.stderr, flush=True)
        before = os.getloadavg()[0]
        results.append(one_run(redis))
        loads.append((before, os.getloadavg()[0]))

    ns = lambda v: f"{v:.1f} ns" if v < 100 else f"{v:.0f} ns"
    x = lambda v: f"{v:.2f}×"
    num = lambda v: f"{v:.0f}"

    def row(label, get, fmt):
        values = []
        for r in results:
            try:
                values.append(get(r))
            except (KeyError, TypeError, ZeroDivisionError):
                values.append(None)
        per_run, sp = spread(values, fmt)
        print(f"| {label} | {per_run} | **{sp}** |")

    rustc = subprocess.run(["rustc", "-V"], capture_output=True, text=True).stdout.strip()
    print(f"\n{runs} run(s) on {os.cpu_count()} CPUs, {rustc}; per-run values, then the spread")
    print("1-minute load average at the start and end of each run (above the CPU count, other")
    print("work shared the machine, and every figure moves with it): " +
          ", ".join(f"{a:.1f}→{b:.1f}" for a, b in loads) + "\n")
    print("| figure | each run | spread |\n|---|---|---|")
    s = lambda k: (lambda r: r[k])
    row("`try_acquire(1)`, tokio clock", s("single_thread/ours_try_acquire"), ns)
    row("`try_acquire(1)`, TSC clock", s("single_thread/ours_try_acquire_tsc_clock"), ns)
    row("governor `check()`", s("single_thread/governor_check"), ns)
    row("ours / governor, one thread, tokio clock",
        lambda r: r["single_thread/ours_try_acquire"] / r["single_thread/governor_check"], x)
    row("ours / governor, one thread, TSC clock",
        lambda r: r["single_thread/ours_try_acquire_tsc_clock"] / r["single_thread/governor_check"], x)
    row("tokio `Instant::now()`", s("clock_read/tokio_Instant_now"), ns)
    row("governor `QuantaClock::now()`", s("clock_read/governor_QuantaClock_now"), ns)
    row("2 threads, aggregate, ours, tokio clock", s("two_threads/ours_try_acquire"), ns)
    row("2 threads, aggregate, ours, TSC clock", s("two_threads/ours_try_acquire_tsc_clock"), ns)
    row("2 threads, aggregate, governor", s("two_threads/governor_check"), ns)
    row("2 threads: our throughput / governor's, tokio clock",
        lambda r: r["two_threads/governor_check"] / r["two_threads/ours_try_acquire"], x)
    row("2 threads: our throughput / governor's, TSC clock",
        lambda r: r["two_threads/governor_check"] / r["two_threads/ours_try_acquire_tsc_clock"], x)
    row("`ready` + `call`, ours, tokio clock", s("service_ready_call/ours_RateLimit_clone"), ns)
    row("`ready` + `call`, ours, TSC clock", s("service_ready_call/ours_RateLimit_clone_tsc_clock"), ns)
    row("`ready` + `call`, tower `RateLimit` (one instance, not shared)", s("service_ready_call/tower_RateLimit"), ns)
    row("`ready` + `call`, tower `Buffer(RateLimit)`", s("service_ready_call/tower_Buffer_RateLimit"), ns)
    row("ours / tower `RateLimit`, tokio clock",
        lambda r: r["service_ready_call/ours_RateLimit_clone"] / r["service_ready_call/tower_RateLimit"], x)
    row("`Buffer(RateLimit)` / ours, tokio clock",
        lambda r: r["service_ready_call/tower_Buffer_RateLimit"] / r["service_ready_call/ours_RateLimit_clone"], x)
    for n in [1, 1000, 100000]:
        row(f"keyed check, {n:,} keys: ours, tokio clock", s(f"keyed_check/ours/{n}"), ns)
        row(f"keyed check, {n:,} keys: ours, TSC clock", s(f"keyed_check/ours_tsc_clock/{n}"), ns)
        row(f"keyed check, {n:,} keys: governor `check_key`", s(f"keyed_check/governor/{n}"), ns)
        row(f"keyed check, {n:,} keys: ours / governor, tokio clock",
            lambda r, n=n: r[f"keyed_check/ours/{n}"] / r[f"keyed_check/governor/{n}"], x)
        row(f"keyed check, {n:,} keys: ours / governor, TSC clock",
            lambda r, n=n: r[f"keyed_check/ours_tsc_clock/{n}"] / r[f"keyed_check/governor/{n}"], x)
    for who in ["ours", "ours_tsc_clock", "governor"]:
        row(f"keyed, 2 threads on one key, aggregate: {who}", s(f"keyed_two_threads_one_key/{who}"), ns)
    for who, clock in [("ours", "tokio"), ("ours_tsc_clock", "TSC")]:
        row(f"keyed, 2 threads on one key: our throughput / governor's, {clock} clock",
            lambda r, w=who: r["keyed_two_threads_one_key/governor"] / r[f"keyed_two_threads_one_key/{w}"], x)
    row("memory per key, 1,000,000 keys: ours (B)", s("memory/ours"), num)
    row("memory per key, 1,000,000 keys: governor (B)", s("memory/governor"), num)
    for group, base, label in [
        ("try_acquire_by_algorithm", "token_bucket", ""),
        ("keyed_try_acquire_by_algorithm", "token_bucket", "per key, 1,000 keys, "),
    ]:
        for name in ["leaky_bucket", "fixed_window", "sliding_window", "sliding_log"]:
            row(f"{label}{name} / token bucket",
                lambda r, g=group, n=name, b=base: r[f"{g}/{n}"] / r[f"{g}/{b}"], x)
    row("per key, 1,000 keys, governor `check_key` / keyed token bucket",
        lambda r: r["keyed_try_acquire_by_algorithm/governor_check_key"]
        / r["keyed_try_acquire_by_algorithm/token_bucket"], x)
    accuracy = sorted({k for r in results for k in r if k.startswith("accuracy/")})
    for k in accuracy:
        name = k.split("/", 1)[1]
        row(f"accuracy, {name}: admitted (ideal 3010; leaky bucket 3001)",
            lambda r, k=k: r[k]["admitted"], num)
        row(f"accuracy, {name}: admitted / its ideal", lambda r, k=k: r[k]["ratio"],
            lambda v: f"{100 * v:.1f} %")
        row(f"accuracy, {name}: max in 100 ms (≤ 110 + 1; leaky bucket ≤ 101 + 1)", lambda r, k=k: r[k]["max100"], num)
        row(f"accuracy, {name}: wake-ups per admission", lambda r, k=k: r[k]["wakeups"],
            lambda v: f"{v:.2f}")
        row(f"accuracy, {name}: CPU ms", lambda r, k=k: r[k]["cpu_ms"], num)
    ours_acq = "accuracy/ours `Bucket::acquire(1)`"
    row("accuracy: governor's CPU / ours", lambda r: r["accuracy/governor 0.10 `until_ready()`"]["cpu_ms"]
        / r[ours_acq]["cpu_ms"], x)
    row("accuracy: ours CPU / the 1 ms interval's", lambda r: r[ours_acq]["cpu_ms"]
        / r["accuracy/(reference) 1 task on `tokio::time::interval(1 ms)`"]["cpu_ms"], x)
    if redis:
        row("Redis: decision / PING, mean", s("redis/decision_per_ping_mean"), x)
        row("Redis: decision / PING, p50", s("redis/decision_per_ping_p50"), x)
        row("Redis: decision / bare TIME+GET+SET script, mean", s("redis/decision_per_floor"), x)
        row("Redis: decisions/s, 1 process, 64 tasks", s("redis/decisions_per_s"), num)
        row("Redis: redis-benchmark EVALSHA/s, 64 connections", s("redis/evalsha_per_s"), num)


if __name__ == "__main__":
    main()
