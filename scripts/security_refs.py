#!/usr/bin/env python3
"""Every test SECURITY.md names exists, and is a test.

SECURITY.md backs each testable claim with the name of the test that checks it,
in backticks: a Rust test (`a_failed_round_is_finished_within_the_access`, or
with its module path, `lease::tests::a_copy_...`) or a pytest function
(`test_recovery_...`). A renamed or deleted test would leave the claim backed by
nothing; this check fails then, naming the reference.

What counts as a test reference: a backticked snake_case name that starts with
`test_` or has at least five words (configuration keys and metric names are
shorter: `max_connections_per_client`), optionally behind a `module::` path.
What counts as a test: a Rust `fn` with a test attribute (`#[test]`,
`#[tokio::test]`, ...) in the lines just above it; a name listed in a
`...!(@tests a, b, ...)` invocation (the engine conformance suite's macro makes a
`#[test]` of each, for every engine); or a Python `def test_...`.

Usage: scripts/security_refs.py [--list]   (--list prints each reference and
where its test is). Exit 1 when a reference names no test.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SKIP = {"target", ".git", "node_modules"}
REF = re.compile(r"`((?:[a-z0-9_]+::)*)([a-z][a-z0-9_]*)`")


def is_test_ref(name):
    return name.startswith("test_") or name.count("_") >= 4


def references(text):
    """(line number, module path, name) of every test reference."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in REF.finditer(line):
            if is_test_ref(m.group(2)):
                out.append((n, m.group(1), m.group(2)))
    return out


def source_files():
    """The Rust and Python files git tracks or would (every file outside build and VCS
    directories when this is not a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                              "--", "*.rs", "*.py"], cwd=ROOT,
                             capture_output=True, check=True).stdout
        yield from (ROOT / f for f in out.decode().split("\0") if f)
        return
    except (OSError, subprocess.CalledProcessError):
        pass
    for p in ROOT.rglob("*"):
        if p.suffix in (".rs", ".py") and not SKIP.intersection(p.relative_to(ROOT).parts):
            yield p


def tests_defined():
    """name -> [file:line] of every Rust test function and pytest test."""
    found = {}
    rs_fn = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?(?:async\s+)?fn\s+([a-z][a-z0-9_]*)\s*[(<]")
    py_def = re.compile(r"^\s*def\s+(test_[a-z0-9_]*)\s*\(")
    listed = re.compile(r"!\(\s*@tests\s+([a-z0-9_,\s]+)\)")
    for p in source_files():
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        lines = text.splitlines()
        if p.suffix == ".rs":
            for m in listed.finditer(text):
                at = text.count("\n", 0, m.start()) + 1
                for name in filter(None, (x.strip() for x in m.group(1).split(","))):
                    found.setdefault(name, []).append(f"{p.relative_to(ROOT)}:{at} (@tests)")
        for i, line in enumerate(lines):
            if p.suffix == ".rs":
                m = rs_fn.match(line)
                if not m:
                    continue
                # A test attribute within the few lines above (other attributes
                # and doc comments may sit between).
                above = lines[max(0, i - 8):i]
                attrs = [a for a in above if a.strip().startswith("#[")]
                if not any(re.search(r"\btest\b", a) for a in attrs):
                    continue
                name = m.group(1)
            else:
                m = py_def.match(line)
                if not m:
                    continue
                name = m.group(1)
            found.setdefault(name, []).append(f"{p.relative_to(ROOT)}:{i + 1}")
    return found


def main():
    text = (ROOT / "SECURITY.md").read_text()
    refs = references(text)
    defined = tests_defined()
    missing = [(n, path, name) for n, path, name in refs if name not in defined]
    if "--list" in sys.argv:
        for n, path, name in refs:
            print(f"SECURITY.md:{n}: {path}{name} -> {', '.join(defined.get(name, ['MISSING']))}")
    if not refs:
        print("SECURITY.md names no test at all: the check would prove nothing", file=sys.stderr)
        return 1
    for n, path, name in missing:
        print(f"SECURITY.md:{n}: `{path}{name}` names no test in the repository", file=sys.stderr)
    if missing:
        return 1
    print(f"SECURITY.md: {len(refs)} test references, {len({r[2] for r in refs})} tests, all found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
