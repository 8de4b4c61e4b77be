#!/usr/bin/env python3
"""The Rust version each feature set of the crate needs, read from the lockfile.

For no features, each feature alone and all features, walk the locked dependency graph that
`cargo metadata` resolves for that set (normal and build dependencies, no dev-dependencies,
this platform) and print the highest `rust-version` any package declares, with the packages
that declare it. No old toolchain is needed: the figure is what the dependencies themselves
promise. The crate's own code is checked against its `rust-version` by clippy's
`incompatible_msrv` lint (part of `clippy::all`, run on every feature set in CI).

  python3 .ci/msrv.py            # a table
  python3 .ci/msrv.py --check    # also fail unless Cargo.toml's rust-version covers the
                                 # default features, and each feature's need is documented
"""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def version_key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v or "0"))[:3] + (0,) * 3


def host():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return re.search(r"^host: (.+)$", out, re.M).group(1)


def need(args):
    """(max rust-version, [package names declaring it]) for `cargo metadata args`."""
    cmd = ["cargo", "metadata", "--format-version", "1", "--locked", "--offline",
           "--filter-platform", host(), *args]
    meta = json.loads(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = meta["resolve"]["root"]
    seen, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if node["id"] == root and kinds <= {"dev"}:
                continue  # the crate's dev-dependencies are not its users' concern
            if dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    best, who = "0", []
    for pid in seen:
        p = packages[pid]
        rv = p.get("rust_version")
        if not rv:
            continue
        if version_key(rv) > version_key(best):
            best, who = rv, [f"{p['name']} {p['version']}"]
        elif version_key(rv) == version_key(best):
            who.append(f"{p['name']} {p['version']}")
    return best, sorted(who)


def main():
    cmd = ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"]
    meta = json.loads(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout)
    [crate] = [p for p in meta["packages"] if p["manifest_path"] == str(ROOT / "Cargo.toml")]
    declared = crate["rust_version"]
    features = [f for f in crate["features"] if f != "default"]
    sets = [("(no features)", ["--no-default-features"])]
    sets += [(f, ["--no-default-features", "--features", f]) for f in features]
    sets.append(("(all features)", ["--all-features"]))
    print(f"declared rust-version: {declared}")
    print(f"{'feature set':<16} {'needs':<8} set by")
    results = {}
    for name, args in sets:
        v, who = need(args)
        results[name] = v
        more = f" and {len(who) - 3} more" if len(who) > 3 else ""
        print(f"{name:<16} {v:<8} {', '.join(who[:3])}{more}")
    if "--check" in sys.argv:
        failed = False
        base = results["(no features)"]
        if version_key(base) != version_key(declared):
            print(f"error: rust-version is {declared}, but the default features need {base}")
            failed = True
        readme = (ROOT / "README.md").read_text()
        for name, v in results.items():
            if version_key(v) > version_key(declared) and not name.startswith("("):
                short = ".".join(v.split(".")[:2])
                if not re.search(rf"`{re.escape(name)}`[^\n]*{re.escape(short)}", readme):
                    print(f"error: README.md does not say that `{name}` needs Rust {short}")
                    failed = True
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
