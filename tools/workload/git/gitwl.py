"""The Git workload of the thesis ("Oblivious RAM in practice", Thoresen,
NTNU 2019: section 4.3.2; tables 5.6-5.8): push a
repository for the first time, clone it, push a new commit, pull it, each step
timed, through an S3 endpoint with git-remote-s3 (`s3://bucket/prefix` remotes) or
through a git:// server (Dulwich's Swift back-end, see dulwich_swift.py).

The repository is generated, reproducibly: `make_repo(path, seed, commits,
mib)` writes `commits` commits of text-like files (a source tree's mix: many small
files, a few larger ones, edits of earlier files) from a PRNG seeded with `seed`,
with fixed author and committer dates, so the same arguments always give the same
HEAD. A compressed size of a few MB needs text that zlib cannot squeeze to nothing:
words drawn from a vocabulary, not repeated blocks.

Command line (used by `oram-workload --git`):

    python gitwl.py run --url s3://bucket/repo --work DIR [--seed 1 --commits 200 --mib 6]

prints one JSON object: the four steps' seconds, the repository's size and HEADs,
and whether the clone and the pull matched byte for byte (git fsck, same HEAD, same
tree). Environment: the AWS_* variables of the endpoint for s3:// URLs.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import time

# The vocabulary: fixed (its own PRNG), the same for every repository.
_vocab = random.Random(0x617)
WORDS = ["".join(_vocab.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(_vocab.randint(2, 12)))
         for _ in range(4000)]


def _text(rng, nbytes):
    words = WORDS
    out = []
    size = 0
    while size < nbytes:
        line = " " * (4 * rng.randint(0, 3)) + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        out.append(line)
        size += len(line) + 1
    return "\n".join(out) + "\n"


def git(repo, *args, env=None, check=True, timeout=600):
    """Runs git in `repo`; its stdout."""
    full = dict(os.environ)
    full.update(
        GIT_AUTHOR_NAME="Workload", GIT_AUTHOR_EMAIL="workload@example.invalid",
        GIT_COMMITTER_NAME="Workload", GIT_COMMITTER_EMAIL="workload@example.invalid",
        GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0",
    )
    full.update(env or {})
    r = subprocess.run(["git", *args], cwd=repo, env=full, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def _commit(repo, rng, i, when):
    env = {"GIT_AUTHOR_DATE": f"@{when} +0000", "GIT_COMMITTER_DATE": f"@{when} +0000"}
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", f"commit {i}: {_text(rng, 40).strip()}", env=env)


def make_repo(path, seed=1, commits=200, mib=6.0):
    """A reproducible repository of `commits` commits and about `mib` MiB of
    packed history at `path` (created; must not exist). Its HEAD."""
    rng = random.Random(seed)
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "core.autocrlf", "false")
    git(path, "config", "gc.auto", "0")
    files = []
    # Bytes of new text per commit, so that the history's blobs total about
    # `mib` MiB compressed (zlib takes such text to about 60 %).
    per_commit = int(mib * (1 << 20) / 0.6 / max(commits, 1))
    for i in range(commits):
        budget = per_commit
        while budget > 0:
            if files and rng.random() < 0.5:
                # Edit an earlier file: append and rewrite part of it.
                f = rng.choice(files)
                add = min(budget, rng.randint(200, 4000))
                with open(os.path.join(path, f), "a") as fh:
                    fh.write(_text(rng, add))
            else:
                d = rng.choice(["src", "src/core", "src/util", "docs", "tests", "examples"])
                f = f"{d}/file_{len(files):05d}.txt"
                os.makedirs(os.path.join(path, d), exist_ok=True)
                add = min(budget, rng.choice([300, 1500, 6000, 30000]))
                with open(os.path.join(path, f), "w") as fh:
                    fh.write(_text(rng, add))
                files.append(f)
            budget -= add
        _commit(path, rng, i, 1_500_000_000 + 3600 * i)
    return git(path, "rev-parse", "HEAD").strip()


def add_commit(path, seed, n=1):
    """`n` more commits (reproducible from `seed` and the history's length); the
    new HEAD."""
    count = int(git(path, "rev-list", "--count", "HEAD").strip())
    rng = random.Random(seed * 1_000_003 + count)
    for k in range(n):
        f = os.path.join(path, "src", f"new_{count + k:05d}.txt")
        os.makedirs(os.path.dirname(f), exist_ok=True)
        with open(f, "w") as fh:
            fh.write(_text(rng, 20000))
        _commit(path, rng, count + k, 1_500_000_000 + 3600 * (count + k))
    return git(path, "rev-parse", "HEAD").strip()


def same(a, b):
    """Problems if clone `b` does not hold `a`'s history byte for byte: git fsck
    (every object's hash checked), the same HEAD, the same tree, the same objects."""
    problems = []
    r = subprocess.run(["git", "fsck", "--full", "--strict"], cwd=b, capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"git fsck in {b}: {r.stdout}{r.stderr}")
    for what in ("HEAD", "HEAD^{tree}"):
        x, y = git(a, "rev-parse", what).strip(), git(b, "rev-parse", what).strip()
        if x != y:
            problems.append(f"{what}: {x} in the source, {y} in the clone")
    objs = lambda p: sorted(git(p, "rev-list", "--objects", "--all").split())  # noqa: E731
    if objs(a) != objs(b):
        problems.append("the clone's objects differ from the source's")
    return problems


def packed_bytes(path):
    """Bytes of the repository's history packed as git would send it."""
    out = subprocess.run(["git", "pack-objects", "--all", "--stdout", "-q"], cwd=path, input="",
                         capture_output=True, timeout=600).stdout
    return len(out)


def timed(f):
    t = time.monotonic()
    f()
    return time.monotonic() - t


def run(url, work, seed=1, commits=200, mib=6.0, source=None):
    """The four steps against `url`; a dict of results. `source`: an existing
    repository to copy instead of generating one."""
    os.makedirs(work, exist_ok=True)
    src, clone = os.path.join(work, "source"), os.path.join(work, "clone")
    for d in (src, clone):
        shutil.rmtree(d, ignore_errors=True)
    if source:
        shutil.copytree(source, src)
    else:
        make_repo(src, seed, commits, mib)
    res = {"url": url, "commits": int(git(src, "rev-list", "--count", "HEAD").strip()),
           "packed_bytes": packed_bytes(src)}
    res["push_s"] = timed(lambda: git(src, "push", "-q", url, "main:refs/heads/main"))
    res["clone_s"] = timed(lambda: git(work, "clone", "-q", "-b", "main", url, clone))
    problems = same(src, clone)
    add_commit(src, seed)
    res["push_commit_s"] = timed(lambda: git(src, "push", "-q", url, "main:refs/heads/main"))
    res["pull_s"] = timed(lambda: git(clone, "pull", "-q", "--ff-only", url, "main"))
    problems += same(src, clone)
    res["head"] = git(src, "rev-parse", "HEAD").strip()
    res["problems"] = problems
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(clone, ignore_errors=True)
    return res


def main(argv):
    import argparse

    p = argparse.ArgumentParser(prog="gitwl.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the four timed steps against a remote URL")
    r.add_argument("--url", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--commits", type=int, default=200)
    r.add_argument("--mib", type=float, default=6.0)
    r.add_argument("--source", help="an existing repository to use instead of a generated one")
    m = sub.add_parser("make", help="only generate the repository")
    m.add_argument("path")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--commits", type=int, default=200)
    m.add_argument("--mib", type=float, default=6.0)
    a = p.parse_args(argv)
    if a.cmd == "make":
        print(make_repo(a.path, a.seed, a.commits, a.mib))
        return 0
    res = run(a.url, a.work, a.seed, a.commits, a.mib, a.source)
    print(json.dumps(res))
    return 0 if not res["problems"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
