"""The Git workload's steps through the real proxy (seed 000, section 4.3.2): git
with git-remote-s3 (PyPI, pinned in requirements.txt) pushes a generated repository
to the proxy's S3 API, clones it back, pushes a new commit and pulls it. Each clone
must hold the source's history byte for byte: `git fsck --full --strict` clean (git
checks every object against its hash), the same HEAD, the same tree, the same set
of objects.

The same through the Swift API (Dulwich's Swift back-end, as the thesis did) is not
tested: no release of dulwich serves a push with it on Python 3 (see
tools/workload/git/dulwich_swift.py and benches/RESULTS.md).
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import ACCESS, SECRET, Proxy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "workload" / "git"))
import gitwl  # noqa: E402

# git-remote-s3 is a git remote helper: an executable `git-remote-s3` on PATH (the
# venv's bin directory, next to this interpreter).
VENV_BIN = pathlib.Path(sys.executable).parent


def git_env(proxy):
    env = dict(os.environ)
    env.pop("AWS_CA_BUNDLE", None)
    env.update(
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
        AWS_ACCESS_KEY_ID=ACCESS,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=proxy.endpoint,
        AWS_CONFIG_FILE=str(proxy.workdir / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(proxy.workdir / "no-aws-credentials"),
    )
    return env


@pytest.fixture(scope="module")
def git_proxy(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.fail("git is not installed (scripts/test.sh installs it)")
    if not (VENV_BIN / "git-remote-s3").exists():
        pytest.fail(f"git-remote-s3 is not in {VENV_BIN} (pip install -r requirements.txt)")
    p = Proxy(tmp_path_factory.mktemp("git-proxy"))
    yield p
    code = p.stop()
    assert code == 0, f"oram-proxy exited with {code} on SIGTERM:\n{p.logs()}"


def test_push_clone_push_pull_through_s3(git_proxy, tmp_path, monkeypatch):
    env = git_env(git_proxy)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    git_proxy.client().create_bucket(Bucket="git")
    src = tmp_path / "source"
    head = gitwl.make_repo(str(src), seed=3, commits=12, mib=0.4)
    # Reproducible: the same seed gives the same history.
    again = tmp_path / "again"
    assert gitwl.make_repo(str(again), seed=3, commits=12, mib=0.4) == head
    url = "s3://git/project"
    gitwl.git(str(src), "push", "-q", url, "main:refs/heads/main")
    # What the proxy stores is git-remote-s3's layout: a bundle per push and HEAD.
    keys = [o["Key"] for o in git_proxy.client().list_objects_v2(Bucket="git").get("Contents", [])]
    assert any(k.startswith("project/refs/heads/main/") and k.endswith(".bundle") for k in keys), keys

    clone = tmp_path / "clone"
    gitwl.git(str(tmp_path), "clone", "-q", "-b", "main", url, str(clone))
    assert gitwl.same(str(src), str(clone)) == []
    assert gitwl.git(str(clone), "rev-parse", "HEAD").strip() == head

    new_head = gitwl.add_commit(str(src), seed=3)
    assert new_head != head
    gitwl.git(str(src), "push", "-q", url, "main:refs/heads/main")
    gitwl.git(str(clone), "pull", "-q", "--ff-only", url, "main")
    assert gitwl.same(str(src), str(clone)) == []
    assert gitwl.git(str(clone), "rev-parse", "HEAD").strip() == new_head

    # A second, fresh clone after the second push: the same again.
    clone2 = tmp_path / "clone2"
    gitwl.git(str(tmp_path), "clone", "-q", "-b", "main", url, str(clone2))
    assert gitwl.same(str(src), str(clone2)) == []


def test_a_damaged_clone_is_detected(tmp_path):
    """The check itself can fail: a clone missing the last commit, and one with a
    corrupted object, are both reported."""
    src = tmp_path / "source"
    gitwl.make_repo(str(src), seed=4, commits=3, mib=0.05)
    behind = tmp_path / "behind"
    subprocess.run(["git", "clone", "-q", "--no-local", str(src), str(behind)], check=True)
    gitwl.add_commit(str(src), seed=4)
    problems = gitwl.same(str(src), str(behind))
    assert any(p.startswith("HEAD:") for p in problems), problems
    broken = tmp_path / "broken"
    subprocess.run(["git", "clone", "-q", "--no-local", str(src), str(broken)], check=True)
    # Unpack, then flip a byte of one loose object.
    pack_dir = broken / ".git" / "objects" / "pack"
    for pack in pack_dir.glob("*.pack"):
        moved = tmp_path / pack.name
        pack.rename(moved)
        (pack_dir / (pack.stem + ".idx")).unlink()
        subprocess.run(["git", "unpack-objects", "-q"], cwd=broken, stdin=open(moved, "rb"), check=True)
    loose = sorted(p for p in (broken / ".git" / "objects").glob("??/*"))
    assert loose
    victim = loose[len(loose) // 2]
    data = bytearray(victim.read_bytes())
    victim.chmod(0o644)
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert gitwl.same(str(src), str(broken)) != []
