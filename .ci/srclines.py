#!/usr/bin/env python3
"""Lines of src/**/*.rs (and .lua) without unit-test modules (#[cfg(test)] mod ... { ... }).
Usage: python3 .ci/srclines.py [REV]  (default: working tree of cwd)."""
import subprocess, sys, re
rev = sys.argv[1] if len(sys.argv) > 1 else None
def files():
    if rev:
        out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"], capture_output=True, text=True).stdout
    else:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "src"], capture_output=True, text=True).stdout
    return [f for f in out.split() if f.endswith((".rs", ".lua"))]
def read(f):
    if rev:
        return subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True).stdout
    return open(f).read()
total = test = 0
for f in files():
    lines = read(f).splitlines()
    total += len(lines)
    i = 0
    while i < len(lines):
        if lines[i].strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"\s*(pub(\(crate\))? )?mod \w+ \{", lines[i+1]):
            depth = 0; j = i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                j += 1
                if depth <= 0: break
            test += j - i; i = j
        else:
            i += 1
print(f"src lines {total}, unit tests {test}, without tests {total - test}")
