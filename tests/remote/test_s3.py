"""s3:// sources against moto's S3 server on loopback: header-only inspect, convert, faults."""

from __future__ import annotations

import json
import uuid

import pytest

from checkpoint_tool.execute import read_manifest
from tests.remote.conftest import tree

pytest.importorskip("s3fs", reason="s3:// needs the remote extra (s3fs)")
pytest.importorskip("moto.moto_server.werkzeug_app", reason="needs moto[server]")

from tests.remote.s3_server import S3Fault, S3Server

SHARD = "model-00002-of-000009.safetensors"
WEIGHTS = (".safetensors", ".index.json")


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with S3Server() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        yield server


@pytest.fixture
def bucket(s3, tiny):
    """A fresh bucket holding the tiny checkpoint under ``models/tiny/``."""
    import boto3

    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    for p in sorted(tiny.iterdir()):
        client.put_object(Bucket=name, Key=f"models/tiny/{p.name}", Body=p.read_bytes())
    return name, client


def test_inspect_reads_headers_only_and_matches_local(bucket, ckpt, tiny):
    name, _ = bucket
    code_r, out, err = ckpt("inspect", f"s3://{name}/models/tiny", "--format", "json")
    code_l, local, _ = ckpt("inspect", str(tiny), "--format", "json")
    assert code_r == code_l and code_r in (0, 1), err
    r, loc = json.loads(out), json.loads(local)
    sent = r["model"].pop("bytes_transferred")
    data = sum(p.stat().st_size for p in tiny.glob("*.safetensors"))
    assert 0 < sent < data / 10
    r.pop("source"), loc.pop("source"), loc["model"].pop("bytes_transferred")
    assert r == loc


def test_convert_is_byte_identical_and_names_bucket_prefix_etags(bucket, ckpt, tmp_path, tiny):
    name, _ = bucket
    ref, dst = tmp_path / "local", tmp_path / "s3"
    assert ckpt("convert", str(tiny), str(ref), "--tp", "2")[0] == 0
    code, _, err = ckpt("convert", f"s3://{name}/models/tiny", str(dst), "--tp", "2")
    assert code == 0, err
    assert tree(dst, WEIGHTS) == tree(ref, WEIGHTS)
    m = read_manifest(dst)
    assert m.source == f"s3://{name}/models/tiny"
    assert m.source_revision.startswith("etags-sha256:")


@pytest.mark.parametrize(
    "fault",
    [
        S3Fault("status", SHARD, times=2, status=503, skip=1),
        S3Fault("status", SHARD, times=1, status=500, skip=1),
        S3Fault("short", SHARD, times=1, after=100, skip=1),
        S3Fault("slow", SHARD, times=1, delay=2.0, skip=1),
    ],
    ids=["503-slowdown", "500", "short-body", "slow"],
)
def test_transient_faults_are_retried(s3, bucket, ckpt, tmp_path, reference, monkeypatch, fault):
    monkeypatch.setenv("CKPT_REMOTE_TIMEOUT", "0.5")
    name, _ = bucket
    ref, dst = reference("--tp", "2"), tmp_path / "s3"
    s3.faults.append(fault)
    code, _, err = ckpt("convert", f"s3://{name}/models/tiny", str(dst), "--tp", "2")
    assert code == 0, err
    assert fault.times == 0  # the fault did fire
    assert tree(dst, WEIGHTS) == tree(ref, WEIGHTS)


def test_overwritten_object_stops_with_nothing_final(s3, bucket, ckpt, tmp_path, tiny):
    name, client = bucket
    data = bytearray((tiny / SHARD).read_bytes())
    data[-16:] = b"\x01" * 16

    def overwrite() -> None:
        client.put_object(Bucket=name, Key=f"models/tiny/{SHARD}", Body=bytes(data))

    s3.faults.append(S3Fault("swap", SHARD, times=1, skip=1, action=overwrite))
    dst = tmp_path / "s3"
    code, _, err = ckpt("convert", f"s3://{name}/models/tiny", str(dst), "--tp", "2")
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert "changed on the server" in last and "412" in last and SHARD in last, err
    assert not list(dst.glob("*.safetensors")) and not (dst / "ckpt-manifest.json").exists()


def test_missing_bucket_and_credentials_are_one_line(s3, ckpt, monkeypatch):
    code, _, err = ckpt("inspect", "s3://no-such-bucket-here/x")
    assert code == 2 and "no-such-bucket-here" in err and "Traceback" not in err, err
