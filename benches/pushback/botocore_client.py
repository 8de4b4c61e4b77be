"""botocore's adaptive client rate limiter against one URL, for benches/pushback/run.sh.

The limiter is wired as `botocore.retries.adaptive.register_retry_handler` wires it (a
CUBIC rate adjustor, a rate clocker, a token bucket starting disabled), with a 429 counting as
a throttling error. Retries follow the SDK's standard mode: exponential backoff with full
jitter for throttling errors (base 1 s, doubling, at most 20 s); `Retry-After` is not read
(the SDKs read only `x-amz-retry-after`). 16 threads, each with a keep-alive session.

Prints one JSON line: requests, ok, status_429, failed, elapsed_s, ok_rps, and series: bin_s
(0.1) and, per bin of that length from the start, ok (2xx responses received in it) and
status_429 (429 responses received in it), as the demo's `--json` prints them.
"""

import json
import random
import sys
import threading
import time

import requests
from botocore.retries import adaptive, bucket, throttling

BIN_S = 0.1  # the series' bin, in seconds


class Is429:
    """The throttling detector: a 429 is a throttling error."""

    def is_throttling_error(self, **kwargs):
        return kwargs.get("status") == 429


def main():
    url, duration = sys.argv[1], float(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    max_attempts = 9  # as the demo: 8 retries
    clock = bucket.Clock()
    limiter = adaptive.ClientRateLimiter(
        rate_adjustor=throttling.CubicCalculator(
            starting_max_rate=0, start_time=clock.current_time()
        ),
        rate_clocker=adaptive.RateClocker(clock),
        token_bucket=bucket.TokenBucket(max_rate=1, clock=clock),
        throttling_detector=Is429(),
        clock=clock,
    )
    lock = threading.Lock()
    counts = {"requests": 0, "ok": 0, "status_429": 0}
    bins = []  # [2xx, 429] per BIN_S from the start
    start = time.monotonic()
    deadline = start + duration

    def record(status):
        column = 0 if 200 <= status < 300 else 1 if status == 429 else None
        if column is None:
            return
        i = int((time.monotonic() - start) / BIN_S)
        with lock:
            bins.extend([0, 0] for _ in range(i + 1 - len(bins)))
            bins[i][column] += 1

    def worker():
        session = requests.Session()
        while time.monotonic() < deadline:
            with lock:
                counts["requests"] += 1
            for attempt in range(max_attempts):
                limiter.on_sending_request(request=None)
                status = session.get(url).status_code
                limiter.on_receiving_response(status=status)
                record(status)
                if status != 429:
                    if 200 <= status < 300:
                        with lock:
                            counts["ok"] += 1
                    break
                with lock:
                    counts["status_429"] += 1
                if attempt + 1 < max_attempts:
                    time.sleep(random.random() * min(20.0, 2.0**attempt))

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.monotonic() - start
    counts["failed"] = counts["requests"] - counts["ok"]
    counts["elapsed_s"] = round(elapsed, 3)
    counts["ok_rps"] = round(counts["ok"] / elapsed, 3)
    counts["series"] = {
        "bin_s": BIN_S,
        "ok": [b[0] for b in bins],
        "status_429": [b[1] for b in bins],
    }
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
