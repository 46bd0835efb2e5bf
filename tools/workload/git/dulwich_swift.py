"""Dulwich's Swift back-end (`contrib/swift.py`, shipped only in dulwich's source
distribution) as a git:// server or repository initialiser, with the fixes below.
It does NOT work yet: kept so that the next attempt starts from what is known.

Usage: python dulwich_swift.py init|daemon -c SWIFT_CONF [REPO | -p PORT [-l ADDR]]
with `$DULWICH_CONTRIB_DIR` naming an unpacked sdist (`pip download --no-binary
:all: --no-deps dulwich==V`), whose `contrib/` (1.x) or `dulwich/contrib/` (0.x)
holds swift.py. The configuration needs auth_ver = 1, region_name and
endpoint_type even with auth v1 (SwiftConnector reads them unconditionally).

What fails, tried 2026-11-24 against oram-proxy's Swift API (auth v1) with git
2.39 pushing a 3-commit repository to git://:

1. Every release that runs on Python 3 (0.19.16, 0.20.0, 0.20.50, 0.22.8, 0.23.2,
   0.24.10, 1.2.21): the server hands the repository path to the back-end as bytes
   and `SwiftRepo.__init__` calls `root.lstrip("/")` (a str method): "TypeError: a
   bytes-like object is required, not 'str'" on every request. 0.25.2's swift.py
   does not import at all (NameError: ObjectFormat). Fixed here: the path is
   decoded in `open_repository`.
2. 1.2.21: receive-pack reads the repository's configuration (receive.maxInputSize)
   and SwiftRepo has none: NotImplementedError(get_config). Fixed here: an empty
   configuration.
3. 1.2.21: receive-pack calls `add_thin_pack(..., max_input_size=...)`, which
   SwiftObjectStore's does not take. Fixed here: the argument is dropped.
4. 0.24.10 and 1.2.21: a new branch's old value is the zero id, which
   SwiftInfoRefsContainer looks up ("bad ref"). Fixed here: treated as none.
5. Unfixed: SwiftObjectStore.add_thin_pack then reads nothing of the pushed pack:
   "remote unpack failed: ... is too small for a packfile (0 < 32)" (1.2.21), "file
   too short to contain pack" (0.24.10); 0.20.50 and 0.22.8 fail earlier writing
   the pack's info ("TypeError: keys must be str, int, float, bool or None, not
   bytes" in json.dumps). The pack reader's contract changed with the server's
   protocol code and the Swift back-end was not carried along; fixing it means
   rewriting its pack upload, i.e. no longer Dulwich's back-end as shipped.
"""

import os
import sys

if os.environ.get("DULWICH_CONTRIB_DIR"):
    sys.path.insert(0, os.environ["DULWICH_CONTRIB_DIR"])

try:
    from contrib import swift  # dulwich >= 1.0: contrib/ beside dulwich/ in the sdist
except ImportError:  # older: dulwich/contrib/swift.py
    from dulwich.contrib import swift


class SwiftBackend(swift.SwiftSystemBackend):
    """The back-end with the repository path decoded (see the module's text)."""

    def open_repository(self, path):
        if isinstance(path, bytes):
            path = path.decode("utf-8")
        repo = super().open_repository(path)
        if not hasattr(type(repo), "get_config") or _abstract(type(repo).get_config):
            # dulwich >= 0.25's receive-pack reads the repository's configuration
            # (receive.maxInputSize); SwiftRepo has none: an empty one.
            from dulwich.config import ConfigFile

            repo.get_config = ConfigFile
        store = repo.object_store
        add_thin_pack = store.add_thin_pack

        def add_thin_pack_compat(read_all, read_some, progress=None, **_ignored):
            # dulwich >= 1.0's receive-pack passes max_input_size, which
            # SwiftObjectStore.add_thin_pack does not take.
            return add_thin_pack(read_all, read_some)

        store.add_thin_pack = add_thin_pack_compat
        refs = repo.refs
        load_check_ref = refs._load_check_ref

        def load_check_ref_compat(name, old_ref):
            # receive-pack passes the zero id as the old value of a ref it
            # creates; SwiftInfoRefsContainer looks that up and fails (KeyError:
            # "bad ref"): a new ref has no old value to check.
            from dulwich.protocol import ZERO_SHA

            return load_check_ref(name, None if old_ref == ZERO_SHA else old_ref)

        refs._load_check_ref = load_check_ref_compat
        return repo


def _abstract(fn):
    from dulwich.repo import BaseRepo

    return fn is getattr(BaseRepo, "get_config", None)


def daemon(args):
    import argparse

    p = argparse.ArgumentParser(prog="dulwich_swift.py daemon")
    p.add_argument("-c", "--swift-config", required=True)
    p.add_argument("-l", "--listen-address", default="127.0.0.1")
    p.add_argument("-p", "--port", type=int, required=True)
    o = p.parse_args(args)
    import gevent.monkey

    gevent.monkey.patch_socket()
    from dulwich import log_utils
    from dulwich.server import TCPGitServer

    logger = log_utils.getLogger(__name__)
    backend = SwiftBackend(logger, swift.load_conf(o.swift_config))
    log_utils.default_logging_config()
    server = TCPGitServer(backend, o.listen_address, port=o.port)
    print(f"listening on {o.listen_address}:{o.port}", flush=True)
    server.serve_forever()


def main(argv):
    if len(argv) >= 2 and argv[1] == "daemon":
        daemon(argv[2:])
    elif len(argv) >= 2 and argv[1] == "init":
        swift.cmd_init(argv[2:])
    else:
        sys.exit("usage: dulwich_swift.py init -c CONF REPO | daemon -c CONF -p PORT [-l ADDR]")


if __name__ == "__main__":
    main(sys.argv)
