#!/usr/bin/env python3
"""The layering check: the one-way data flow, derived from the folders.

Every workspace crate is classified by the folder its manifest is in (see
ARCHITECTURE.md); a crate added to a folder is checked without editing this
script. Rules (normal dependencies, transitive, unless said otherwise):

* foundations (crates/, engines/, storage-backends/ except s3, proxy/volume,
  tools/linkshape) use no HTTP or S3 crate — proxy/volume none but through the
  S3 back-end it opens and the cluster's coordination layer it wires;
* crates/ uses no engine, back-end, proxy or tool crate;
* an engine (a crate in engines/ whose Cargo.toml does not say
  `[package.metadata.layering] role = "engine-core"`) depends on no other engine,
  in normal or test builds (a crate may name engines its tests run over with
  `test-peers = [...]`); an engine core depends on no engine;
* only proxy/volume (and tests/, benches/, tools/, fuzz/) names engines and
  back-ends directly (optional, feature-gated test support aside): it is where
  they are wired together;
* the front-ends (proxy crates with `role = "front-end"`) use no engine,
  back-end or state database, name neither the engine nor the state contracts
  directly, and use no other front-end or its protocol crates (`protocol =
  [...]`, patterns of crate names);
* proxy/volume uses neither proxy/server nor proxy/cli, and proxy/server does not
  use proxy/cli, in any kind of dependency;
* proxy/cluster (the coordination layer over etcd) uses no other workspace crate,
  in any kind of dependency: a leaf the volume and the server can use;
* inside every crate under proxy/, the top-level modules import each other
  without a cycle (test modules excepted).
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HTTP = re.compile(
    r"^(hyper|hyper-util|s3s|aws-sdk-[a-z0-9-]+|aws-smithy-[a-z0-9-]+|axum|reqwest|http)$"
)
TESTING = ("tests", "benches", "tools", "fuzz")

failures = []


def fail(message):
    failures.append(message)
    print(f"layering violation: {message}", file=sys.stderr)


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def folder(pkg):
    rel = os.path.relpath(os.path.dirname(pkg["manifest_path"]), ROOT)
    return rel


def tree(name, edges="normal", depth=None, prune=()):
    """The names of the packages `name` depends on (itself excluded), without the
    subtrees of `prune`."""
    cmd = ["cargo", "tree", "-p", name, "-e", edges, "--prefix", "none", "--format", "{p}"]
    if depth is not None:
        cmd += ["--depth", str(depth)]
    for p in prune:
        cmd += ["--prune", p]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    names.discard(name)
    return names


def layering_of(pkg):
    return (pkg.get("metadata") or {}).get("layering") or {}


def check_crates():
    pkgs = metadata()["packages"]
    by_folder = {folder(p): p for p in pkgs}
    top = lambda f: f.split("/")[0]
    names_in = lambda t: {p["name"] for f, p in by_folder.items() if top(f) == t}
    engines_dir = {p["name"]: p for f, p in by_folder.items() if top(f) == "engines"}
    cores = {n for n, p in engines_dir.items() if layering_of(p).get("role") == "engine-core"}
    engines = set(engines_dir) - cores
    backends = names_in("storage-backends")
    proxy = names_in("proxy")
    tools = names_in("tools")
    front_ends = {
        p["name"]: p for f, p in by_folder.items()
        if top(f) == "proxy" and layering_of(p).get("role") == "front-end"
    }
    volume = by_folder["proxy/volume"]["name"]
    server = by_folder["proxy/server"]["name"]
    cli = by_folder["proxy/cli"]["name"]

    foundations = [
        p["name"] for f, p in sorted(by_folder.items())
        if top(f) in ("crates", "engines")
        or (top(f) == "storage-backends" and f != "storage-backends/s3")
        or f in ("proxy/volume", "tools/linkshape")
    ]
    s3_backend = by_folder["storage-backends/s3"]["name"]
    for name in foundations:
        # The volume opens the S3 back-end, whose client speaks HTTP, and wires the
        # cluster's coordination layer, which speaks HTTP to etcd's gateway: those
        # are the two ways HTTP crates may reach it.
        cluster_crate = by_folder.get("proxy/cluster", {}).get("name")
        prune = [s3_backend, cluster_crate] if name == volume else []
        bad = sorted(d for d in tree(name, prune=prune) if HTTP.match(d))
        if bad:
            fail(f"{name} depends on HTTP/S3 crates: {', '.join(bad)}")

    for name in sorted(names_in("crates")):
        bad = sorted(tree(name) & (engines | cores | backends | proxy | tools))
        if bad:
            fail(f"foundation {name} depends on {', '.join(bad)}")

    for name in sorted(backends):
        bad = sorted(tree(name) & (engines | cores | proxy))
        if bad:
            fail(f"back-end {name} depends on {', '.join(bad)}")

    for name, pkg in sorted(engines_dir.items()):
        allowed = set(layering_of(pkg).get("test-peers", []))
        normal = tree(name)
        with_tests = tree(name, "normal,dev")
        if name in cores:
            bad = sorted(with_tests & engines)
            if bad:
                fail(f"engine core {name} depends on engines {', '.join(bad)}")
            continue
        bad = sorted((normal & engines) | ((with_tests & engines) - allowed))
        bad = [b for b in bad if b != name]
        if bad:
            fail(f"engine {name} depends on engines {', '.join(bad)}")

    wiring_allowed = {volume} | {
        p["name"] for f, p in by_folder.items() if top(f) in TESTING
    } | set(engines_dir)
    for pkg in pkgs:
        name = pkg["name"]
        if name in wiring_allowed:
            continue
        # Optional dependencies are test support behind a feature (the engine
        # conformance suite runs over the memory and fs back-ends).
        direct = {
            d["name"] for d in pkg["dependencies"]
            if d.get("kind") is None and not d.get("optional")
        }
        bad = sorted(direct & (engines | backends))
        if bad:
            fail(f"{name} names engines or back-ends directly ({', '.join(bad)}): only "
                 f"{volume} wires them")

    protocols = {n: set(layering_of(p).get("protocol", [])) for n, p in front_ends.items()}
    for name in sorted(front_ends):
        deps = tree(name)
        direct = tree(name, depth=1)
        bad = deps & (engines | cores | backends | {"oram-statedb"})
        bad |= direct & {"oram-engine", "oram-state"}
        for other, proto in protocols.items():
            if other != name:
                bad |= {d for d in deps if d == other or any(re.fullmatch(r, d) for r in proto)}
        if bad:
            fail(f"front-end {name} depends on {', '.join(sorted(bad))}")

    # The cluster's coordination layer speaks HTTP to etcd (so it is no foundation)
    # but must stay a leaf: no engine, back-end, front-end, state, volume, server or
    # binary, so that the volume and the server can both use it later without a
    # cycle, and what reaches etcd depends on this crate alone.
    cluster = by_folder.get("proxy/cluster")
    if cluster:
        workspace = {p["name"] for p in pkgs}
        bad = sorted(tree(cluster["name"], "normal,dev,build") & workspace)
        if bad:
            fail(f"{cluster['name']} depends on workspace crates {', '.join(bad)}: it is a leaf")

    for name, forbidden in ((volume, {server, cli}), (server, {cli})):
        bad = sorted(tree(name, "normal,dev,build") & forbidden)
        if bad:
            fail(f"{name} depends on {', '.join(bad)}")

    return [f for f in by_folder if top(f) == "proxy"]


# ---- module cycles ----

def strip_tests(text):
    """The text without `#[cfg(test)] mod tests { ... }` (the rest of the file from
    there: test modules come last) and without comments."""
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if m:
        text = text[: m.start()]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def module_files(src):
    """Top-level module name → its files (the module's file and every file under its
    folder), for a crate whose root is src/lib.rs or src/main.rs."""
    mods = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            mods.setdefault(entry[:-3], []).append(path)
        elif os.path.isdir(path):
            for dirpath, _, files in os.walk(path):
                for f in files:
                    if f.endswith(".rs"):
                        mods.setdefault(entry, []).append(os.path.join(dirpath, f))
    return mods


def test_only(src, mods):
    """Modules declared only under `#[cfg(test)]` in the crate roots."""
    out = set()
    for root in ("lib.rs", "main.rs"):
        p = os.path.join(src, root)
        if os.path.exists(p):
            text = open(p).read()
            out |= set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)", text))
    return out & set(mods)


def reexports(src, mods):
    """Names the crate root re-exports from a top-level module: name → module."""
    out = {}
    for root in ("lib.rs", "main.rs"):
        p = os.path.join(src, root)
        if not os.path.exists(p):
            continue
        text = strip_tests(open(p).read())
        for m in re.finditer(r"pub\s+use\s+(\w+)::(\{[^}]*\}|\w+)", text):
            module, names = m.group(1), m.group(2)
            if module not in mods:
                continue
            for n in re.findall(r"\w+", names):
                out[n] = module
    return out


def check_cycles(crate_dir):
    src = os.path.join(ROOT, crate_dir, "src")
    mods = module_files(src)
    for t in test_only(src, mods):
        del mods[t]
    names = reexports(src, mods)
    edges = {m: set() for m in mods}
    for mod, files in mods.items():
        for path in files:
            rel = os.path.relpath(path, src)
            depth = rel.count("/") + (0 if rel.endswith("mod.rs") else 1)
            text = strip_tests(open(path).read())
            targets = re.findall(r"\bcrate::(\w+)", text)
            # `super::` from a top-level module's own file is the crate root.
            if depth == 1:
                targets += re.findall(r"\bsuper::(\w+)", text)
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                targets += re.findall(r"^\s*(\w+)", group, re.M)
                targets += re.findall(r",\s*(\w+)", group)
            for t in targets:
                target = t if t in mods else names.get(t)
                if target and target != mod:
                    edges[mod].add(target)
    for scc in strongly_connected(edges):
        if len(scc) > 1:
            fail(f"{crate_dir}: modules import each other in a cycle: {{{', '.join(sorted(scc))}}}")
    return edges


def strongly_connected(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on.discard(w)
                scc.add(w)
                if w == v:
                    break
            out.append(scc)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    proxy_crates = check_crates()
    for crate_dir in sorted(proxy_crates):
        check_cycles(crate_dir)
    if failures:
        sys.exit(1)
    print(
        "layering: foundations free of HTTP/S3 crates; no engine depends on another; only "
        "proxy/volume wires engines and back-ends; front-ends use only the object layer; "
        "proxy/cluster is a leaf; "
        f"no module cycle in {', '.join(sorted(proxy_crates))}"
    )


if __name__ == "__main__":
    main()
