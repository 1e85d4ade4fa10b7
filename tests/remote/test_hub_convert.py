"""Streaming convert from the loopback hub: byte-identical outputs, faults, resume, hashes."""

from __future__ import annotations

import json
import shutil

import pytest

from checkpoint_tool.execute import read_manifest
from tests.remote.conftest import COMMIT, REPO, tree
from tests.remote.hub_server import Fault

WEIGHTS = (".safetensors", ".index.json")
SHARD = "model-00002-of-000009.safetensors"


@pytest.fixture
def local_out(reference):
    """The same conversion from the local folder (the reference)."""
    return reference("--tp", "2")


def _convert(ckpt, dst, *extra: str) -> tuple[int, str]:
    code, _, err = ckpt("convert", f"hf://{REPO}@main", str(dst), "--tp", "2", *extra)
    return code, err


def test_remote_convert_is_byte_identical_and_pins_the_commit(hub, ckpt, tmp_path, local_out):
    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst)
    assert code == 0, err
    assert tree(dst, WEIGHTS) == tree(local_out, WEIGHTS)
    side = ("tokenizer_config.json", "generation_config.json")
    assert {n: (dst / n).read_bytes() for n in side} == {
        n: (local_out / n).read_bytes() for n in side
    }
    m = read_manifest(dst)
    assert (m.source, m.source_revision) == (f"hf://{REPO}", COMMIT)
    local = read_manifest(local_out)
    assert [(f.name, f.size, f.header_sha256) for f in m.source_files] == [
        (f.name, f.size, f.header_sha256) for f in local.source_files
    ]
    assert not list(dst.glob("*.partial*")) and not list(dst.glob(".*partial*"))


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", SHARD, times=2, status=503),
        Fault("status", SHARD, times=1, status=429),
        Fault("drop", SHARD, times=2, after=1000, skip=1),
        Fault("short", SHARD, times=1, after=10, skip=1),
        Fault("slow", SHARD, times=1, delay=2.0, skip=1),
    ],
    ids=["503", "429", "reset-mid-range", "short-body", "slow"],
)
def test_transient_faults_are_retried(hub, ckpt, tmp_path, local_out, monkeypatch, fault):
    monkeypatch.setenv("CKPT_REMOTE_TIMEOUT", "0.5")
    hub.faults.append(fault)
    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst)
    assert code == 0, err
    assert fault.times == 0  # the fault did fire
    assert tree(dst, WEIGHTS) == tree(local_out, WEIGHTS)


def test_persistent_failure_is_one_line_then_resume_finishes(
    hub, ckpt, tmp_path, reference, monkeypatch
):
    monkeypatch.setenv("CKPT_REMOTE_RETRIES", "2")
    hub.faults.append(Fault("status", SHARD, times=10**6, status=500, skip=1))
    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst, "--max-shard-size", "2MB")
    assert code == 2
    last = err.strip().splitlines()[-1]  # after the progress lines
    assert "HTTP 500 after 3 attempts" in last and SHARD in last and "Traceback" not in err, err
    done = {n for n in tree(dst, (".safetensors",))}
    hub.faults.clear()
    code, err = _convert(ckpt, dst, "--max-shard-size", "2MB", "--resume")
    assert code == 0, err
    ref = reference("--tp", "2", "--max-shard-size", "2MB")
    assert tree(dst, WEIGHTS) == tree(ref, WEIGHTS)
    assert done < set(tree(dst, (".safetensors",)))  # some files were kept from the first run


def test_a_file_changing_between_reads_stops_with_nothing_final(hub, ckpt, tmp_path, tiny):
    changed = tmp_path / "changed.safetensors"
    shutil.copyfile(tiny / SHARD, changed)
    with open(changed, "r+b") as fh:  # same size and header, other tensor bytes
        fh.seek(-16, 2)
        fh.write(b"\x01" * 16)
    hub.faults.append(Fault("swap", SHARD, times=1, skip=1, swap_to=changed))
    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert "changed on the server" in last and SHARD in last and "Traceback" not in err, err
    assert not list(dst.glob("*.safetensors")) and not (dst / "ckpt-manifest.json").exists()


def test_hash_source_checks_the_lfs_sha256(hub, ckpt, tmp_path, tiny):
    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst, "--hash-source")
    assert code == 0, err
    sha = {f.name: f.sha256 for f in read_manifest(dst).source_files}
    listed = json.loads(
        hub.repos[REPO].folder.joinpath("model.safetensors.index.json").read_text()
    )["weight_map"]
    assert set(sha) == set(listed.values())
    import hashlib

    assert sha[SHARD] == hashlib.sha256((tiny / SHARD).read_bytes()).hexdigest()
    hub.repos[REPO].lfs_lies[SHARD] = "0" * 64
    code, err = _convert(ckpt, tmp_path / "again", "--hash-source")
    assert code == 2 and "LFS" in err and SHARD in err, err


def test_plan_driven_prefetch_reads_each_byte_once_in_few_requests(hub, ckpt, tmp_path, tiny):
    from checkpoint_tool.catalog import open_local

    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst)
    assert code == 0, err
    shards = sorted(tiny.glob("*.safetensors"))
    gets = [r for r in hub.requests if r.startswith("GET") and r.endswith(".safetensors")]
    redirects = [r for r in gets if "/resolve/" in r]
    assert len(redirects) <= 2 * len(shards)  # catalog + convert: the storage URL is reused
    tensors = len(open_local(tiny).tensors)
    data = sum(p.stat().st_size for p in shards)
    data_gets = [r for r in gets if r.startswith("GET /lfs-cdn/")]
    # not one request per tensor: two header reads (inspect, convert) and a few segments per
    # shard (output order jumps between shards, so a shard's runs form several segments)
    assert len(data_gets) <= 6 * len(shards) < tensors / 5
    assert hub.bytes_sent <= data * 1.01 + sum(
        (tiny / n).stat().st_size for n in ("config.json", "model.safetensors.index.json")
    ) + (64 << 10) * len(shards)


def test_verify_against_the_remote_source(hub, ckpt, tmp_path):
    dst = tmp_path / "remote"
    code, err = _convert(ckpt, dst)
    assert code == 0, err
    code, out, err = ckpt("verify", str(dst), "--source", f"hf://{REPO}@main", "--format", "json")
    assert code == 0, err + out
    # a byte of the output changed: the lossless check against the remote source must see it
    shard = sorted(dst.glob("*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, out, err = ckpt("verify", str(dst), "--source", f"hf://{REPO}@main", "--format", "json")
    assert code == 1, err + out


def test_a_read_after_the_file_was_swapped_raises_at_once(hub, tiny, tmp_path):
    import shutil

    from checkpoint_tool.catalog.remote.hub import HubStore
    from checkpoint_tool.errors import InputError

    store = HubStore.open(REPO, "main")
    first = store.read(SHARD, 0, 1024)
    assert first == (tiny / SHARD).read_bytes()[:1024]
    changed = tmp_path / "changed.safetensors"
    shutil.copyfile(tiny / SHARD, changed)
    with open(changed, "r+b") as fh:
        fh.seek(-1, 2)
        fh.write(b"\x07")
    hub.replace(REPO, SHARD, changed)
    with pytest.raises(InputError, match="changed on the server while ckpt read it"):
        store.read(SHARD, 0, 1024)  # the same bytes, but no longer the same file
