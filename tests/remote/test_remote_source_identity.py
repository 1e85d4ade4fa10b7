"""A hub shard replaced between a failed run and --resume (same size and header, other bytes,
a new LFS sha256): the resumed run stops with one line naming it, nothing mixed."""

from __future__ import annotations

import shutil

from tests.remote.conftest import REPO, tree
from tests.remote.hub_server import Fault

SHARD = "model-00002-of-000009.safetensors"


def test_resume_after_a_hub_shard_changed_is_refused(hub, ckpt, tmp_path, tiny, monkeypatch):
    monkeypatch.setenv("CKPT_REMOTE_RETRIES", "1")
    opts = ("--tp", "2", "--max-shard-size", "2MB")
    hub.faults.append(Fault("status", SHARD, times=10**6, status=500, skip=1))
    dst = tmp_path / "remote"
    code, _, err = ckpt("convert", f"hf://{REPO}@main", str(dst), *opts)
    assert code == 2, err
    hub.faults.clear()
    changed = tmp_path / "changed.safetensors"
    shutil.copyfile(tiny / SHARD, changed)
    with open(changed, "r+b") as fh:  # same size and header, other tensor bytes
        fh.seek(-16, 2)
        fh.write(b"\x01" * 16)
    hub.replace(REPO, SHARD, changed)
    before = tree(dst)
    code, _, err = ckpt("convert", f"hf://{REPO}@main", str(dst), *opts, "--resume")
    last = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err, err
    assert f"{SHARD}: source shard changed since the interrupted run started" in last, last
    assert tree(dst) == before
