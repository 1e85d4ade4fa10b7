"""Header-only hub reads through the loopback server: bytes, revisions, cache, offline, token."""

from __future__ import annotations

import json
import struct

from tests.remote.conftest import COMMIT, REPO, V1

SPECULATIVE = 64 << 10


def _expected_bytes(folder) -> int:
    """config + index + per shard max(64 KiB, 8 + header) (capped by the file size)."""
    total = sum(
        (folder / n).stat().st_size for n in ("config.json", "model.safetensors.index.json")
    )
    for p in folder.glob("*.safetensors"):
        with open(p, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
        total += min(p.stat().st_size, max(SPECULATIVE, 8 + n))
    return total


def test_inspect_transfers_only_config_index_and_headers(hub, ckpt, tiny):
    code, out, err = ckpt("inspect", f"hf://{REPO}@main", "--format", "json")
    assert code == 0, err
    model = json.loads(out)["model"]
    assert model["bytes_transferred"] == hub.bytes_sent == _expected_bytes(tiny)
    data = sum(p.stat().st_size for p in tiny.glob("*.safetensors"))
    assert hub.bytes_sent < data / 10
    n = len(list(tiny.glob("*.safetensors")))
    data_gets = [r for r in hub.requests if r.startswith("GET /lfs-cdn/")]
    redirects = [r for r in hub.requests if "/resolve/" in r and r.endswith(".safetensors")]
    assert len(data_gets) == len(redirects) == n  # one ranged read each, one redirect each


def test_inspect_matches_a_local_inspect(hub, ckpt, tiny):
    code_r, remote, err = ckpt("inspect", f"hf://{REPO}", "--tp", "2", "--format", "json")
    code_l, local, _ = ckpt("inspect", str(tiny), "--tp", "2", "--format", "json")
    assert code_r == code_l and code_r in (0, 1), err  # 1: the report has findings
    r, loc = json.loads(remote), json.loads(local)
    for doc in (r, loc):
        doc.pop("source")
        doc["model"].pop("bytes_transferred")
    assert r == loc


def test_revision_resolves_to_a_commit_in_the_plan(hub, ckpt):
    for rev, commit in (("main", COMMIT), ("v1", V1), (COMMIT, COMMIT)):
        code, out, err = ckpt("plan", f"hf://{REPO}@{rev}", "--format", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert (doc["source"], doc["source_revision"]) == (f"hf://{REPO}", commit)
    assert any(f"/resolve/{V1}/" in r for r in hub.requests)  # read at the commit, not "v1"


def test_unknown_repo_and_revision_are_one_line_errors(hub, ckpt):
    for src in (f"hf://{REPO}@nope", "hf://org/missing"):
        code, _, err = ckpt("inspect", src)
        assert code == 2
        assert len(err.strip().splitlines()) == 1 and "404" in err, err


def test_offline_uses_only_the_cache(hub, ckpt, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = ckpt("inspect", f"hf://{REPO}@main")
    assert code == 2 and "HF_HUB_OFFLINE" in err and "not in the local cache" in err, err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    from huggingface_hub import snapshot_download

    snapshot_download(REPO, cache_dir=tmp_path / "hf-cache", endpoint=hub.endpoint)
    seen = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = ckpt("plan", f"hf://{REPO}@main", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["source_revision"] == COMMIT
    assert len(hub.requests) == seen  # not one request


def test_a_complete_cached_snapshot_is_read_locally(hub, ckpt, tmp_path):
    from huggingface_hub import snapshot_download

    snapshot_download(REPO, cache_dir=tmp_path / "hf-cache", endpoint=hub.endpoint)
    sent = hub.bytes_sent
    code, out, err = ckpt("inspect", f"hf://{REPO}", "--format", "json")
    assert code == 0, err
    assert hub.bytes_sent == sent  # only the revision API call
    assert json.loads(out)["model"]["bytes_transferred"] is None  # local shards


def test_token_is_sent_never_printed(hub, ckpt, monkeypatch):
    hub.token = "hf_SeCrEt0123456789"
    code, _, err = ckpt("inspect", f"hf://{REPO}")
    assert code == 2 and "HF_TOKEN" in err and "401" in err, err
    monkeypatch.setenv("HF_TOKEN", "hf_wrongWrongWrong")
    code, out, err = ckpt("inspect", f"hf://{REPO}")
    assert code == 2 and "hf_wrong" not in err + out, err
    monkeypatch.setenv("HF_TOKEN", hub.token)
    code, out, err = ckpt("inspect", f"hf://{REPO}")
    assert code == 0, err
    assert hub.token not in out + err
    assert hub.auth[-1] == f"Bearer {hub.token}"


def test_validate_remote_reads_headers_and_scales_through_the_server(hub, ckpt, tiny):
    code_r, out, err = ckpt("validate", f"hf://{REPO}@main", "--format", "json")
    code_l, local, _ = ckpt("validate", str(tiny), "--format", "json")
    assert code_r == code_l, err

    def checks(doc: str) -> dict[str, str]:
        return {c["id"]: c["status"] for c in json.loads(doc)["checks"]}

    remote, ref = checks(out), checks(local)
    assert {k: v for k, v in remote.items() if k != "checksums"} == {
        k: v for k, v in ref.items() if k != "checksums"
    }
    data = sum(p.stat().st_size for p in tiny.glob("*.safetensors"))
    assert hub.bytes_sent < data / 2  # headers and scales, not the weights


def test_validate_remote_finds_a_bad_scale_on_the_server(hub, ckpt, tiny, tmp_path):
    import shutil

    from checkpoint_tool.catalog import open_local

    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad)
    cat = open_local(bad)
    entry = next(e for n, e in sorted(cat.tensors.items()) if n.endswith("weight_scale_inv"))
    with open(bad / entry.file, "r+b") as fh:  # a NaN scale (F32 0x7fc00000)
        fh.seek(entry.begin)
        fh.write(bytes.fromhex("0000c07f"))
    hub.repos[REPO].folder = bad
    code, out, err = ckpt("validate", f"hf://{REPO}@main", "--format", "json")
    assert code == 1, err
    assert entry.name in out


def test_tensor_reads_one_tensor_by_range(hub, ckpt, tiny):
    from checkpoint_tool.catalog import open_local

    cat = open_local(tiny)
    name = next(n for n in sorted(cat.tensors) if n.endswith("experts.1.down_proj.weight"))
    code_r, out, err = ckpt("tensor", f"hf://{REPO}", name, "--format", "json")
    code_l, local, _ = ckpt("tensor", str(tiny), name, "--format", "json")
    assert code_r == code_l == 0, err
    r, loc = json.loads(out), json.loads(local)
    r.pop("source", None), loc.pop("source", None)
    assert r == loc  # the same stats of the dequantized values
    entry = cat.tensors[name]
    assert hub.bytes_sent < 2 * (64 << 10) * len(cat.files) + entry.nbytes * 3 + (1 << 20)


def test_an_index_naming_a_missing_shard_is_one_line(hub, ckpt, tiny, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    (broken / "model-00003-of-000009.safetensors").unlink()
    hub.repos[REPO].folder = broken
    code, _, err = ckpt("inspect", f"hf://{REPO}")
    assert code == 2 and "model-00003-of-000009.safetensors" in err and "missing" in err, err
    assert f"hf://{REPO}@{COMMIT}" in err and len(err.strip().splitlines()) == 1
