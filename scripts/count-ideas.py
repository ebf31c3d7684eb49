#!/usr/bin/env python3
"""Counts two of issue 37's measures in non-test code under a source tree (default: src/), the same
way before and after a change (`scripts/count-ideas.py <other checkout>/src`):

- `to_string()` flattening of errors below the CLI: outside `src/cli/` and `src/main.rs`, lines
  that turn an error into text: `<e|err|error|why|source|fault|problem>.to_string()`,
  `map_err(ToString::to_string)`, or a format string that says `{e}`, `{err}`, `{error}`, `{why}`.
- files of more than three ideas: a file's top-level items (fn, struct, enum, trait, type, const,
  static; an `impl` joins its type) are linked when one names another; an idea is a connected
  group of items. A file with more than three groups holds more than three ideas.
Test code is left out: a file's `#[cfg(test)]` and all below it, and files named `*tests.rs`.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
ERR = r"(?:e|err|error|why|source|fault|problem)"
FLATTEN = re.compile(
    r"\b" + ERR + r"\.to_string\(\)|map_err\(\s*ToString::to_string\s*\)|\"[^\"\n]*\{" + ERR + r"\}[^\"\n]*\""
)
ITEM = re.compile(
    r"^(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+(?=fn)|unsafe\s+)*"
    r"(fn|struct|enum|trait|type|const|static|impl)\b(.*)$"
)


def non_test(text):
    text = re.split(r"^#\[cfg\(test\)\]", text, maxsplit=1, flags=re.M)[0]
    return re.sub(r"^\s*//.*$", "", text, flags=re.M)


def item_name(kind, rest):
    if kind == "impl":
        head = rest.split("{")[0]
        head = re.sub(r"^<.*?>\s*", "", head.strip())
        target = head.split(" for ")[-1]
        target = re.sub(r"<.*", "", target).strip()
        return target.split("::")[-1] or None
    m = re.match(r"\s*(\w+)", rest)
    return m.group(1) if m else None


def ideas(text):
    items = {}
    current = None
    for line in text.splitlines():
        m = ITEM.match(line)
        if m and not line.startswith(" "):
            name = item_name(m.group(1), m.group(2))
            if name:
                current = name
                items.setdefault(current, [])
        if current:
            items[current].append(line)
    names = list(items)
    parent = {n: n for n in names}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a in names:
        body = "\n".join(items[a])
        for b in names:
            if a != b and re.search(r"\b" + re.escape(b) + r"\b", body):
                parent[find(a)] = find(b)
    return len({find(n) for n in names})


flattened = 0
wide = []
for dirpath, _, files in os.walk(root):
    for f in sorted(files):
        if not f.endswith(".rs") or f.endswith("tests.rs"):
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, root)
        text = non_test(open(path, encoding="utf-8").read())
        if not (rel.startswith("cli" + os.sep) or rel == "main.rs"):
            flattened += sum(1 for line in text.splitlines() if FLATTEN.search(line))
        n = ideas(text)
        if n > 3:
            wide.append((n, rel))
if os.environ.get("VERBOSE"):
    for n, rel in sorted(wide, reverse=True):
        print(f"  ideas: {rel} {n}")
print(f"to_string() flattening of errors below the CLI: {flattened}")
print(f"files of more than three ideas: {len(wide)}")
