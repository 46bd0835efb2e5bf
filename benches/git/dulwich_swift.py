"""Dulwich's Swift back-end (`contrib/swift.py`, shipped only in dulwich's source
distribution) as a git:// server or repository initialiser, with one fix.

Usage: python dulwich_swift.py init|daemon -c SWIFT_CONF [repo | -l ADDR -p PORT]
with the directory holding the sdist's `contrib/` package on PYTHONPATH (or
`$DULWICH_CONTRIB_DIR`).

The fix: dulwich's server hands the repository path to the back-end as bytes (the
git protocol's bytes), and `SwiftRepo.__init__` calls `root.lstrip("/")` on it, a
str method: every request fails with "TypeError: a bytes-like object is required,
not 'str'". That is so in every release that runs on Python 3 (checked: 0.19.16,
0.20.0, 0.20.50, 0.22.8, 0.23.2, 0.24.10, 1.2.21; 0.25.2's swift.py does not even
import: NameError ObjectFormat). This wrapper decodes the path before the back-end
sees it and changes nothing else.
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
