#!/usr/bin/env python3
"""Counts where the code says String (or copies a lifecycle) where a type belongs (issue 28).

Usage: python3 scripts/type-counts.py SRC_DIR [-v]

Reads every .rs file under SRC_DIR, leaves out test code (files a `#[cfg(test)] mod x;` names,
`*_tests.rs`, items under `#[cfg(test)]` or `#[test]`), and prints one count per line:

  result_string     `Result<T, String>` written in a type (aliases of `Result` included)
  from_for_string   `impl From<X> for String`
  map_err_string    `.map_err(..)` whose argument makes a string (to_string, format!, String::from,
                    ToString, `.into()` of a literal)
  flattened         a typed error made text: `e.to_string()` / `{e}` in a format string, where the
                    name is an error's (e, err, error, *_err, *_error)
  lifecycle_copies  functions outside converge/hold.rs that start an operation's hold themselves
                    (`hold::start(`): each is one copy of id → hold → run → finish
  plan_context      places that build a `PlanContext { .. }`
  kind_named        places that name a target kind outside the seam (converge/targets/, the model
                    mesh/model.rs and the mesh file's reader workspace/file*), test code included,
                    by the rules tests/target_seam.rs holds (read here from the text, not parsed):
                    a path to a kind (`Target::Docker`, `model::Target`, `mesh.default_target()`),
                    a literal that is a kind's
                    word, a kind in a sentence (outside backends/), a `kind` compared with or
                    matched on a literal, a predicate named for a kind (`is_docker`); the fence's
                    exceptions (a Host header, the docker CLI, gc's and an operation's kinds) are
                    not counted
  kind_words        identifiers and CLI flags that say a kind's word outside the seam, the model,
                    the reader and backends/ (each backend names its own outside system), test
                    code included: an identifier's words (snake_case and CamelCase split) include
                    docker, kubernetes, kube, kubectl, kubeconfig, k8s, namespace, workload or
                    `kind` + `load`/`loaded` (the kind cluster's image loader), and a `--context`
                    flag (a Kubernetes context; `context` alone is the build context's word);
                    `dockerfile` and `docker` + `ignore` are files a build reads, not kinds.
                    tests/target_seam.rs refuses the same (read there with syn)

With -v every hit is printed as file:line beside its count. The same script measures the tree
before and after (check out the old commit into a worktree and point it there).
"""

import os
import re
import sys

ERROR_NAME = r"(?:e|err|error|\w+_err|\w+_error)"


def strip_comments_and_strings(text):
    """Two texts of the same length as `text`: the code with comments and literal contents
    blanked, and the text with comments blanked only (for format strings)."""
    code, kept = list(text), list(text)
    i, n = 0, len(text)

    def blank(target, start, end):
        for j in range(start, end):
            if target[j] != "\n":
                target[j] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(code, i, j)
            blank(kept, i, j)
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(code, i, j)
            blank(kept, i, j)
            i = j
            continue
        raw = re.match(r'b?r(#*)"', text[i:i + 8])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + raw.group(1)
            j = text.find(end, i + raw.end())
            j = n if j < 0 else j + len(end)
            blank(code, i + raw.end(), j - len(end))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(code, i + 1, j)
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])[^']*?'", text[i:i + 12])
            if m and (len(m.group(0)) <= 4 or m.group(1) == "\\"):
                blank(code, i + 1, i + len(m.group(0)) - 1)
                i += len(m.group(0))
                continue
        i += 1
    return "".join(code), "".join(kept)


def block_end(code, start):
    """Index after the item that begins at `start` (its `;` or its balanced braces)."""
    depth = 0
    for j in range(start, len(code)):
        ch = code[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        elif ch == ";" and depth == 0:
            return j + 1
    return len(code)


def without_tests(code, test_modules, also):
    """Blank items under #[cfg(test)] / #[test] in `code` and in `also` (same positions); note
    the file modules a cfg(test) mod names."""
    out, other = list(code), list(also)
    for m in re.finditer(r"#\[(?:cfg\(test\)|test|tokio::test[^\]]*)\]", code):
        start = m.end()
        name = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[start:])
        if name:
            test_modules.add(name.group(1))
        end = block_end(code, start)
        for j in range(m.start(), end):
            if out[j] != "\n":
                out[j] = " "
                other[j] = " "
    return "".join(out), "".join(other)


def generic_args(code, open_at):
    """The top-level arguments of the `<...>` opening at `open_at`, or None."""
    depth, args, current = 0, [], []
    for j in range(open_at, min(len(code), open_at + 400)):
        ch = code[j]
        if ch == "<":
            depth += 1
            if depth == 1:
                continue
        elif ch == ">" and code[j - 1] != "-":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args
        elif ch in "{};":
            return None
        if depth == 1 and ch == ",":
            args.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    return None


def balanced(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "(":
            depth += 1
        elif code[j] == ")":
            depth -= 1
            if depth == 0:
                return code[open_at + 1:j]
    return code[open_at + 1:]


def makes_string(arg):
    """Whether a map_err argument turns the error into a String (not into another type)."""
    arg = arg.strip()
    if re.fullmatch(r"(?:String::from|ToString::to_string|\|\s*\w+\s*:?[^|]*\|\s*\w+\.to_string\(\))", arg):
        return True
    closure = re.match(r"\|[^|]*\|\s*(.*)", arg, re.S)
    if not closure:
        return False
    body = closure.group(1).strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    # A constructor around the text (ConvergeError::Failed(e.to_string())) is a type, not a String.
    if re.match(r"[A-Z]\w*(::\w+)*\s*[({]", body):
        return False
    return bool(re.match(r"format!", body) or re.search(r"\.to_string\(\)\s*$", body)
                or re.search(r"\.into\(\)\s*$", body) and '""' in body)


def line_of(code, index):
    return code.count("\n", 0, index) + 1


def count_file(path, rel, raw, hits):
    code, kept = strip_comments_and_strings(raw)
    test_modules = set()
    code, raw_kept = without_tests(code, test_modules, kept)

    def hit(kind, index, text=code):
        hits[kind].append(f"{rel}:{line_of(text, index)}")

    for m in re.finditer(r"\bResult\s*<", code):
        args = generic_args(code, m.end() - 1)
        if args and len(args) == 2 and re.fullmatch(r"(?:std::string::)?String", args[1]):
            hit("result_string", m.start())
    for m in re.finditer(r"\bimpl\s+From\s*<[^{]*?>\s+for\s+String\b", code):
        hit("from_for_string", m.start())
    for m in re.finditer(r"\.map_err\s*\(", code):
        if makes_string(balanced(code, m.end() - 1)):
            hit("map_err_string", m.start())
    for m in re.finditer(rf"\b{ERROR_NAME}\s*\.\s*to_string\s*\(\s*\)", code):
        hit("flattened", m.start())
    # `format!("… {e}")`: an error made a String value (printing one to a person is not counted).
    for m in re.finditer(r'\bformat!\s*\(\s*"((?:[^"\\]|\\.)*)"', raw_kept):
        named = re.search(rf"(?<!\{{)\{{{ERROR_NAME}(?::[^}}]*)?\}}", m.group(1))
        args = balanced(raw_kept, raw_kept.index("(", m.start()))
        positional = re.search(rf",\s*&?{ERROR_NAME}\s*[,)]", args + ")")
        if named or positional:
            hit("flattened", m.start(), raw_kept)
    if not rel.endswith("converge/hold.rs"):
        for m in re.finditer(r"\bhold::start\s*\(", code):
            hit("lifecycle_copies", m.start())
    for m in re.finditer(r"\bPlanContext\s*\{", code):
        before = code[max(0, m.start() - 40):m.start()]
        if not re.search(r"(struct|impl|for)\s*(<[^>]*>)?\s*$", before):
            hit("plan_context", m.start())
    return test_modules


KINDS = ["docker", "kubernetes"]
KIND_ALLOWED = ("converge/targets/", "mesh/model.rs", "workspace/file")
# tests/target_seam.rs's EXCEPTIONS: (file, what the hit is).
KIND_EXCEPTIONS = [
    ("backends/daemon/buildkit.rs", "word docker"),
    ("backends/daemon/session.rs", "word docker"),
    ("backends/buildx.rs", "word docker"),
    ("converge/build.rs", "sentence"),
    ("converge/gc/mod.rs", "compared image"),
    ("converge/gc/mod.rs", "compared manifest"),
    ("widgets/record_history.rs", "compared rollback"),
]
NAME_PART = r"[\w./:-]"


def count_kinds(rel, raw, hits):
    """The places `rel` names a target kind (see kind_named above)."""
    if rel.startswith(KIND_ALLOWED):
        return
    code, kept = strip_comments_and_strings(raw)
    variants = "|".join(k.capitalize() for k in KINDS)
    words = "|".join(KINDS)
    found = []
    for m in re.finditer(rf"\bTarget::({variants})\b|\b(model|mesh)::Target\b|\bTarget\s+as\s+\w+"
                         r"|\.default_target\(\)|\bmesh\.target\(", code):
        found.append(("path", m.start()))
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', kept):
        text = m.group(1)
        if text.strip().lower() in KINDS:
            found.append(("word " + text.strip().lower(), m.start()))
        elif not rel.startswith("backends/") and re.search(
                rf"(?i)(?<!{NAME_PART})({words})(?!{NAME_PART})", text):
            found.append(("sentence", m.start()))
    kind = r"\b\w*kind\b(?:\(\))?(?:\.\w+\(\))*"
    for m in re.finditer(rf'{kind}\s*[!=]=\s*"(\w*)"|"(\w*)"\s*[!=]=\s*&?\w[\w.]*kind\b', kept):
        found.append(("compared " + (m.group(1) or m.group(2) or ""), m.start()))
    for m in re.finditer(rf"\bmatch\s+[\w.&*]*kind\b[^{{]*\{{", kept):
        body = kept[m.end():block_end(kept, m.end() - 1)]
        for arm in re.finditer(r'(?m)^\s*"(\w*)"(?:\s*\|\s*"\w*")*\s*=>', body):
            found.append(("compared " + arm.group(1), m.start()))
    for m in re.finditer(rf"(?i)\b(?:is|on|uses|for|targets|via|has|when)_({words})\b|\b({words})_(?:target|kind|only|specific|mode)\b", code):
        found.append(("predicate", m.start()))
    for what, index in found:
        if any(rel == f and what.startswith(w) for f, w in KIND_EXCEPTIONS):
            continue
        hits["kind_named"].append(f"{rel}:{line_of(kept, index)} {what}")


KIND_WORDS = {"docker", "kubernetes", "kube", "kubectl", "kubeconfig", "k8s", "namespace",
              "namespaces", "workload", "workloads"}
WORDS_ALLOWED = ("converge/targets/", "mesh/model.rs", "workspace/file", "backends/")


def words_of(ident):
    """An identifier's words, lower case: `note_docker_stamps` → note, docker, stamps;
    `KindLoaded` → kind, loaded; `DOCKER_HOST` → docker, host."""
    out = []
    for part in ident.split("_"):
        out += [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", part)]
    return out


def kind_word_in(words):
    for i, w in enumerate(words):
        after = words[i + 1] if i + 1 < len(words) else ""
        if w == "docker" and after == "ignore":
            continue
        if w in KIND_WORDS or (w == "kind" and after in ("load", "loaded", "loads")):
            return w if w != "kind" else "kind " + after
    return None


def count_kind_words(rel, raw, hits):
    """Identifiers and CLI flags that say a kind's word (see kind_words above)."""
    if rel.startswith(WORDS_ALLOWED):
        return
    code, kept = strip_comments_and_strings(raw)
    for m in re.finditer(r"\b(?:r#)?([A-Za-z_][A-Za-z0-9_]*)\b", code):
        word = kind_word_in(words_of(m.group(1)))
        if word:
            hits["kind_words"].append(f"{rel}:{line_of(code, m.start())} {m.group(1)}")
    # A clap flag: `#[arg(long ...)]` over a field named for a kind's place, or `long = "…"`.
    for m in re.finditer(r"#\[arg\(([^\]]*)\)\]\s*(?:///[^\n]*\n\s*|#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:", kept):
        named = re.search(r'\blong\s*=\s*"([^"]*)"', m.group(1))
        flag = named.group(1) if named else (m.group(2).replace("_", "-") if re.search(r"\blong\b", m.group(1)) else None)
        if flag and (flag == "context" or kind_word_in(words_of(flag.replace("-", "_")))):
            hits["kind_words"].append(f"{rel}:{line_of(kept, m.start())} --{flag}")


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    verbose = "-v" in sys.argv[1:]
    if len(args) != 1 or not os.path.isdir(args[0]):
        print("usage: type-counts.py SRC_DIR [-v]", file=sys.stderr)
        sys.exit(2)
    root = args[0]
    kinds = ["result_string", "from_for_string", "map_err_string", "flattened",
             "lifecycle_copies", "plan_context", "kind_named", "kind_words"]
    hits = {k: [] for k in kinds}
    files = []
    for folder, _, names in os.walk(root):
        files += [os.path.join(folder, n) for n in names if n.endswith(".rs")]
    # A file a `#[cfg(test)] mod x;` names is test code, as are `*_tests.rs` and `tests.rs`.
    test_files = set()
    per_file = {}
    for path in sorted(files):
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        rel = os.path.relpath(path, root)
        file_hits = {k: [] for k in kinds}
        mods = count_file(path, rel, raw, file_hits)
        count_kinds(rel, raw, file_hits)
        count_kind_words(rel, raw, file_hits)
        per_file[rel] = file_hits
        folder = os.path.dirname(rel)
        stem = os.path.splitext(os.path.basename(rel))[0]
        for mod in mods:
            own = stem if stem != "mod" else ""
            test_files.add(os.path.normpath(os.path.join(folder, own, mod + ".rs")))
            test_files.add(os.path.normpath(os.path.join(folder, own, mod, "mod.rs")))
    for rel, file_hits in per_file.items():
        name = os.path.basename(rel)
        hits["kind_named"] += file_hits["kind_named"]
        hits["kind_words"] += file_hits["kind_words"]
        if rel in test_files or name == "tests.rs" or name.endswith("_tests.rs"):
            continue
        for k in kinds:
            if k not in ("kind_named", "kind_words"):
                hits[k] += file_hits[k]
    for k in kinds:
        print(f"{k:17} {len(hits[k])}")
        if verbose:
            for h in hits[k]:
                print(f"    {h}")


if __name__ == "__main__":
    main()
