#!/usr/bin/env python3
"""What one object write costs the file system, the fs back-end's two ways.

  atomic   -- a new temporary file, write, fsync, rename over the old file
              (BlockStore::put_many; the directory fsync once per batch is left out);
  in place -- open the existing file, pwrite at 0, fdatasync
              (BlockStore::put_many_redoable, used for journaled bucket write-backs).

Writes N objects of each size into a scratch directory (default: a new one under
the current directory; pass --dir on the file system the proxy's data directory
is on) and prints microseconds per object and MiB/s. Alternates the two ways over
several rounds so that a noisy machine affects both alike.

  python3 benches/fs/overwrite.py --rounds 3
"""

import argparse
import os
import shutil
import tempfile
import time


def write_atomic(d, i, data):
    tmp = os.path.join(d, f".t{i}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(d, str(i)))


def write_in_place(d, i, data):
    fd = os.open(os.path.join(d, str(i)), os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, data, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="16384:512,262144:64", help="size:count,...")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="fs-overwrite-", dir=a.dir)
    try:
        print(f"| object size | objects | round | atomic µs/object | in place µs/object | ratio |")
        print(f"|---|---|---|---|---|---|")
        for spec in a.sizes.split(","):
            size, n = map(int, spec.split(":"))
            data = os.urandom(size)
            d = os.path.join(root, str(size))
            os.makedirs(d)
            for i in range(n):  # the objects exist, as bucket objects do
                write_atomic(d, i, data)
            for r in range(1, a.rounds + 1):
                res = {}
                for name, f in (("atomic", write_atomic), ("in place", write_in_place)):
                    t = time.perf_counter()
                    for i in range(n):
                        f(d, i, data)
                    res[name] = (time.perf_counter() - t) / n * 1e6
                print(f"| {size // 1024} KiB | {n} | {r} | {res['atomic']:.0f} | {res['in place']:.0f} "
                      f"| {res['atomic'] / res['in place']:.1f} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
