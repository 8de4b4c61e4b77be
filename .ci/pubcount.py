#!/usr/bin/env python3
"""Count the public items of tower-throttle's rustdoc JSON.

Usage: python3 .ci/pubcount.py [CRATE_DIR]   (default: current directory)
Builds `cargo +nightly rustdoc --all-features` JSON into $PUBCOUNT_TARGET, default
CRATE_DIR/target/pubcount (a separate target dir, so the stable build is not invalidated), then prints the number of
this crate's items with `visibility: public`, excluding `use` re-exports, impls and
trait-impl members (whose visibility is `default`), with a breakdown by kind.
"""
import collections, json, os, subprocess, sys

crate = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
target = os.environ.get("PUBCOUNT_TARGET") or os.path.join(crate, "target", "pubcount")
subprocess.run(
    ["cargo", "+nightly", "rustdoc", "-q", "--lib", "--all-features", "--target-dir", target,
     "--", "-Z", "unstable-options", "--output-format", "json"],
    cwd=crate, check=True)
doc = json.load(open(os.path.join(target, "doc", "tower_throttle.json")))
kinds = collections.Counter()
for item in doc["index"].values():
    if item.get("crate_id") != 0 or item.get("visibility") != "public":
        continue
    kind = next(iter(item["inner"])) if isinstance(item["inner"], dict) else item["inner"]
    if kind in ("use", "impl"):
        continue
    kinds[kind] += 1
print(sum(kinds.values()), "public items:",
      ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])))
