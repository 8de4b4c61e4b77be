#!/usr/bin/env python3
"""Which top-level modules of src each top-level module uses, and the pairs that use each other.

A use is any `crate::X` path in code (comments and doc comments left out), grouped imports
(`use crate::{a::B, c}`) included; an item re-exported at the root (`crate::Bucket`) counts as
a use of the module it comes from. A top-level module is a file `src/X.rs` or a folder `src/X/`.

  python3 .ci/imports.py            # each module and what it uses, then the cycles
  python3 .ci/imports.py --check    # fail when two modules use each other
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def code(text):
    """The text without comments (line and block); string literals are kept as they are."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def group(text, start):
    """The names a `crate::{...}` group starting at text[start] == '{' brings in."""
    depth, item, names = 0, "", []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and ch == ",":
            names.append(item)
            item = ""
        else:
            item += ch
    names.append(item)
    return {m.group(1) for n in names if (m := re.match(r"\s*(\w+)", n))}


def uses(path):
    text = code(path.read_text())
    found = set()
    for m in re.finditer(r"\bcrate::(\w+|\{)", text):
        if m.group(1) == "{":
            found |= group(text, m.end() - 1)
        else:
            found.add(m.group(1))
    return found


def reexports():
    """Root item -> the module lib.rs re-exports it from (`pub use crate::m::...::{A, B}`)."""
    found = {}
    for m in re.finditer(r"pub use crate::(\w+)::([^;]*);", code((SRC / "lib.rs").read_text())):
        for item in re.findall(r"\w+", m.group(2).rsplit("::", 1)[-1]):
            found[item] = m.group(1)
    return found


def main():
    roots = reexports()
    modules = {}
    for p in SRC.iterdir():
        if p.name == "lib.rs":
            continue
        name = p.stem if p.suffix == ".rs" else p.name
        files = [p] if p.is_file() else list(p.rglob("*.rs"))
        used = set().union(*map(uses, files))
        modules[name] = {roots.get(u, u) for u in used} - {name}
    for name in sorted(modules):
        modules[name] &= modules.keys()
        print(f"{name}: {', '.join(sorted(modules[name])) or '-'}")
    cycles = sorted((a, b) for a in modules for b in modules[a] if a < b and a in modules[b])
    print(f"\nmodules that use each other: {len(cycles)}")
    for a, b in cycles:
        print(f"  {a} <-> {b}")
    if "--check" in sys.argv and cycles:
        sys.exit(1)


if __name__ == "__main__":
    main()
