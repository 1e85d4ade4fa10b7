"""Structure rules beyond the bad-input matrix: total_size, duplicates, layouts without index."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from checkpoint_tool.errors import InputError
from checkpoint_tool.validate import ValidateOptions, validate_checkpoint
from checkpoint_tool.validate.context import safe_relative

from .factory import INDEX, build_checkpoint, read_header_doc, rewrite_header

SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("pristine") / "ckpt")


@pytest.fixture
def ckpt(pristine: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(pristine, dst)
    return dst


def findings(report, rule: str) -> list:
    return [f for f in report.findings() if f.rule == rule]


def set_total_size(d: Path, value: object) -> None:
    index = json.loads((d / INDEX).read_text())
    if value is None:
        index.pop("metadata")
    else:
        index["metadata"]["total_size"] = value
    (d / INDEX).write_text(json.dumps(index))


def test_total_size_as_sum_of_file_sizes_only_warns(ckpt: Path) -> None:
    """Real Quark file-to-file output writes the file-size sum: warn, exit 0 (1 if strict)."""
    file_sum = sum((ckpt / f).stat().st_size for f in (SHARD1, SHARD2))
    set_total_size(ckpt, file_sum)
    report = validate_checkpoint(ckpt)
    (f,) = findings(report, "total_size")
    assert f.severity == "warning" and str(file_sum) in f.message
    assert report.exit_code == 0
    assert validate_checkpoint(ckpt, ValidateOptions(strict=True)).exit_code == 1


def test_total_size_wrong_is_an_error(ckpt: Path) -> None:
    index = json.loads((ckpt / INDEX).read_text())
    set_total_size(ckpt, index["metadata"]["total_size"] + 2)
    report = validate_checkpoint(ckpt)
    (f,) = findings(report, "total_size")
    assert f.severity == "error" and report.exit_code == 1


@pytest.mark.parametrize(("value", "severity"), [(None, "warning"), ("12", "error")])
def test_total_size_absent_or_not_a_number(ckpt: Path, value, severity) -> None:
    set_total_size(ckpt, value)
    (f,) = findings(validate_checkpoint(ckpt), "total_size")
    assert f.severity == severity


def test_total_size_matches_independent_sum(ckpt: Path) -> None:
    """The expected sum, computed from the raw headers here, is what the rule accepts."""
    total = 0
    for shard in (SHARD1, SHARD2):
        _, doc = read_header_doc(ckpt / shard)
        total += sum(
            e[1] - e[0] for k, v in doc.items() if k != "__metadata__" for e in [v["data_offsets"]]
        )
    set_total_size(ckpt, total)
    assert findings(validate_checkpoint(ckpt), "total_size") == []


def test_duplicate_tensor_across_shards(tmp_path: Path) -> None:
    name = "model.norm.weight"

    def dup(table: dict, config: dict) -> None:
        table[name + "_copy"] = table[name]

    def placement(n: str) -> int:
        return 2 if n.startswith("model.layers.1.") or n.endswith("_copy") else 1

    dst = build_checkpoint(tmp_path / "c", mutate=dup, shards=placement)

    def rename(doc: dict) -> None:  # shard 2 now also holds model.norm.weight
        doc[name] = doc.pop(name + "_copy")

    index = json.loads((dst / INDEX).read_text())
    holder = index["weight_map"].pop(name + "_copy")
    (dst / INDEX).write_text(json.dumps(index))
    assert holder == SHARD2
    other = SHARD1
    rewrite_header(dst / holder, rename)
    report = validate_checkpoint(dst)
    (f,) = findings(report, "tensor_duplicate")
    assert f.tensor == name and holder in f.message and other in f.message


def test_duplicate_key_inside_one_header(ckpt: Path) -> None:
    p = ckpt / SHARD1
    raw = p.read_bytes()
    n, doc = read_header_doc(p)
    key = "model.norm.weight"
    entry = json.dumps(doc[key], separators=(",", ":"))
    text = raw[8 : 8 + n].decode()
    dup = text.replace("{", f'{{"{key}":{entry},', 1).rstrip()
    assert len(dup) > len(text.rstrip())
    dup_b = dup.encode() + b" " * (-len(dup) % 8)
    p.write_bytes(struct.pack("<Q", len(dup_b)) + dup_b + raw[8 + n :])
    (f,) = findings(validate_checkpoint(ckpt), "tensor_duplicate")
    assert f.tensor == key and f.file == SHARD1


def test_tensor_not_in_index_and_index_entry_not_in_shard(ckpt: Path) -> None:
    index = json.loads((ckpt / INDEX).read_text())
    index["weight_map"]["model.layers.0.mlp.ghost.weight"] = SHARD1
    del index["weight_map"]["model.norm.weight"]
    (ckpt / INDEX).write_text(json.dumps(index))
    hits = {f.tensor: f for f in findings(validate_checkpoint(ckpt), "index_tensors")}
    assert set(hits) == {"model.layers.0.mlp.ghost.weight", "model.norm.weight"}
    assert "does not hold it" in hits["model.layers.0.mlp.ghost.weight"].message
    assert "not listed" in hits["model.norm.weight"].message


def test_index_not_json(ckpt: Path) -> None:
    (ckpt / INDEX).write_text("{not json")
    report = validate_checkpoint(ckpt)
    (f,) = findings(report, "index_valid")
    assert f.file == INDEX and report.exit_code == 1
    by_id = {c.id: c for c in report.checks}
    assert by_id["shard_unreferenced"].status.value == "skipped"
    # the shards on disk are still checked
    assert by_id["scale_values"].status.value == "passed"


def test_folder_without_index_is_valid(ckpt: Path) -> None:
    (ckpt / INDEX).unlink()
    report = validate_checkpoint(ckpt)
    assert report.exit_code == 0, [f.line() for f in report.findings()]
    skipped = {c.id for c in report.checks if c.status.value == "skipped"}
    assert {"index_valid", "total_size", "shard_unreferenced"} <= skipped


def test_single_file_is_checked_alone(ckpt: Path) -> None:
    report = validate_checkpoint(ckpt / SHARD1)
    assert report.summary.files == 1
    # layer 1 lives in the other shard: completeness sees it missing
    assert findings(report, "layers_present")


@pytest.mark.parametrize("make", ["missing", "empty", "pickle", "txt"])
def test_not_a_checkpoint_is_an_input_error(tmp_path: Path, make: str) -> None:
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    elif make == "pickle":
        target.mkdir()
        (target / "pytorch_model.bin").write_bytes(b"\x80\x04")
    elif make == "txt":
        target = tmp_path / "notes.txt"
        target.write_text("hi")
    with pytest.raises(InputError) as exc:
        validate_checkpoint(target)
    assert exc.value.exit_code == 2
    if make == "pickle":
        assert "pickle" in exc.value.message


@pytest.mark.parametrize(
    ("rel", "safe"),
    [
        ("model-00001.safetensors", "model-00001.safetensors"),
        ("sub/../model.safetensors", "model.safetensors"),
        ("sub/model.safetensors", "sub/model.safetensors"),
        ("../model.safetensors", None),
        ("/etc/passwd", None),
        ("a/../../b.safetensors", None),
        ("C:\\x.safetensors", None),
        ("", None),
        (7, None),
    ],
)
def test_safe_relative(rel, safe) -> None:
    assert safe_relative(rel) == safe


def test_symlinked_shards_are_not_traversal(tmp_path: Path, pristine: Path) -> None:
    """Hub caches link shards to blobs elsewhere; the index names are what must stay inside."""
    dst = tmp_path / "snapshot"
    blobs = tmp_path / "blobs"
    shutil.copytree(pristine, dst)
    blobs.mkdir()
    for shard in (SHARD1, SHARD2):
        (dst / shard).rename(blobs / shard)
        (dst / shard).symlink_to(blobs / shard)
    report = validate_checkpoint(dst)
    assert report.exit_code == 0, [f.line() for f in report.findings()]


def test_unsupported_quant_method(tmp_path: Path) -> None:
    def awq(table: dict, config: dict) -> None:
        config["quantization_config"] = {"quant_method": "awq", "bits": 4}

    report = validate_checkpoint(build_checkpoint(tmp_path / "c", mutate=awq))
    (f,) = findings(report, "quant_config")
    assert f.file == "config.json" and f.message.startswith("quantization_config.quant_method")
    assert "'awq' is not supported" in f.message
    checks = {c.id: c for c in report.checks}
    assert checks["scale_shape"].status.value == "skipped"
    assert "see quant_config" in checks["scale_shape"].skipped_reason
    assert report.exit_code == 1


def test_missing_config_json(ckpt: Path) -> None:
    (ckpt / "config.json").unlink()
    report = validate_checkpoint(ckpt)
    (f,) = findings(report, "config_json")
    assert f.file == "config.json" and "missing" in f.message
    assert report.exit_code == 1
    # structure and value rules still ran
    checks = {c.id: c for c in report.checks}
    assert checks["scale_values"].status.value == "passed"
    assert checks["experts_present"].status.value == "skipped"


@pytest.mark.parametrize(
    ("name", "flagged"),
    [
        ("model.layers.5.mlp.down_proj.weight", True),  # layer 5 of a 2-layer model
        ("model.vision_tower.layers.5.input_layernorm.weight", False),  # another stack
    ],
)
def test_layers_beyond_the_config(tmp_path: Path, name: str, flagged: bool) -> None:
    def add(table: dict, config: dict) -> None:
        table[name] = table["model.norm.weight"]

    report = validate_checkpoint(build_checkpoint(tmp_path / "c", mutate=add))
    hits = [f.tensor for f in findings(report, "tensors_explained")]
    assert hits == ([name] if flagged else [])
    assert report.exit_code == int(flagged)
