"""The bad-input matrix: each damage yields its own finding (rule, file, tensor) and exit 1.

Each case starts from the same realistic checkpoint (real Quark 0.13 names, dtypes, shapes and
config; see factory.py), damages it the way real pipelines do, and checks that the expected
rule fires on the expected file/tensor, and that a clean copy does not fire it.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from checkpoint_tool.validate import ValidateOptions, validate_checkpoint

from .factory import (
    INDEX,
    build_checkpoint,
    poke_tensor,
    read_header_doc,
    rewrite_header,
    shard_holding,
)

EXPERT0_GATE_SCALE = "model.layers.1.mlp.experts.0.gate_proj.weight_scale"
ATTN_SCALE = "model.layers.1.self_attn.o_proj.weight_scale"  # BF16 per-channel
SHARD2 = "model-00002-of-00002.safetensors"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("pristine") / "ckpt")


@pytest.fixture
def ckpt(pristine: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(pristine, dst)
    return dst


def rules_of(report) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in report.findings():
        out.setdefault(f.rule, []).append(f)
    return out


def test_pristine_checkpoint_is_clean(pristine: Path) -> None:
    report = validate_checkpoint(pristine, ValidateOptions(scan_weights=True, strict=True))
    assert report.findings() == []
    assert report.exit_code == 0


# -- damage functions (each one real-world failure) -------------------------------------------


def truncate_shard(d: Path) -> None:
    p = d / SHARD2
    p.write_bytes(p.read_bytes()[:-1000])


def corrupt_header(d: Path) -> None:
    p = d / SHARD2
    raw = bytearray(p.read_bytes())
    raw[8:12] = b"\x00\xff{["  # not JSON any more
    p.write_bytes(bytes(raw))


def offsets_past_eof(d: Path) -> None:
    def edit(doc: dict) -> None:
        begin, end = doc[EXPERT0_GATE_SCALE]["data_offsets"]
        doc[EXPERT0_GATE_SCALE]["data_offsets"] = [begin + 10**6, end + 10**6]

    rewrite_header(d / SHARD2, edit)


def index_traversal(d: Path) -> None:
    index = json.loads((d / INDEX).read_text())
    index["weight_map"][EXPERT0_GATE_SCALE] = "../../etc/model-00002-of-00002.safetensors"
    (d / INDEX).write_text(json.dumps(index))


def missing_shard(d: Path) -> None:
    (d / SHARD2).unlink()


def stale_shard(d: Path) -> None:
    shutil.copy(d / SHARD2, d / "model-00003-of-00003.safetensors")


def drop_tensor(table: dict, config: dict) -> None:
    del table["model.layers.1.mlp.experts.2.up_proj.weight"]
    del table["model.layers.1.mlp.experts.2.up_proj.weight_scale"]


def extra_expert(table: dict, config: dict) -> None:
    for suffix in ("weight", "weight_scale"):
        table[f"model.layers.1.mlp.experts.4.gate_proj.{suffix}"] = table[
            f"model.layers.1.mlp.experts.3.gate_proj.{suffix}"
        ]


def wrong_scale_shape(table: dict, config: dict) -> None:
    dtype, (rows, cols), data = table[EXPERT0_GATE_SCALE]
    table[EXPERT0_GATE_SCALE] = (dtype, (rows, cols - 1), data[: rows * (cols - 1)])


def e8m0_nan(d: Path) -> None:
    poke_tensor(d, EXPERT0_GATE_SCALE, 8 * 5 + 2, b"\xff")  # row 5, group 2


def inf_scale(d: Path) -> None:
    poke_tensor(d, ATTN_SCALE, 2 * 7, struct.pack("<H", 0x7F80))  # BF16 +inf at [7]


def unused_pattern(table: dict, config: dict) -> None:
    qc = config["quantization_config"]
    qc["layer_quant_config"]["model.layers.7.self_attn.o_proj"] = qc["layer_quant_config"][
        "*self_attn*"
    ]


def with_manifest_then_edit(d: Path) -> None:
    report = validate_checkpoint(d, ValidateOptions(write_manifest=True))
    assert report.exit_code == 0 and report.manifest_written
    poke_tensor(d, "model.layers.1.mlp.experts.1.down_proj.weight", 3, b"\x42\x24")


# (case id, damage after writing, mutation before writing, expected rule, file, tensor)
MATRIX: list[tuple[str, Callable | None, Callable | None, str, str | None, str | None]] = [
    ("truncated shard", truncate_shard, None, "shard_truncated", SHARD2, None),
    ("corrupted header", corrupt_header, None, "header_valid", SHARD2, None),
    ("offsets past EOF", offsets_past_eof, None, "offsets_in_range", SHARD2, EXPERT0_GATE_SCALE),
    ("index path traversal", index_traversal, None, "index_paths", INDEX, EXPERT0_GATE_SCALE),
    ("missing shard", missing_shard, None, "shard_missing", SHARD2, None),
    ("extra stale shard", stale_shard, None, "shard_unreferenced",
     "model-00003-of-00003.safetensors", None),
    ("tensor missing", None, drop_tensor, "experts_present", None,
     "model.layers.1.mlp.experts.2.up_proj.weight"),
    ("extra tensor", None, extra_expert, "tensors_explained", SHARD2,
     "model.layers.1.mlp.experts.4.gate_proj.weight"),
    ("wrong scale shape", None, wrong_scale_shape, "scale_shape", SHARD2, EXPERT0_GATE_SCALE),
    ("E8M0 NaN", e8m0_nan, None, "scale_values", SHARD2, EXPERT0_GATE_SCALE),
    ("inf scale", inf_scale, None, "scale_values", SHARD2, ATTN_SCALE),
    ("checksum mismatch", with_manifest_then_edit, None, "checksums", SHARD2, None),
    ("config pattern matching nothing", None, unused_pattern, "quant_config", "config.json", None),
]  # fmt: skip


def damaged(tmp_path: Path, pristine: Path, damage, mutate) -> Path:
    dst = tmp_path / "ckpt"
    if mutate is not None:
        build_checkpoint(dst, mutate=mutate)
    else:
        shutil.copytree(pristine, dst)
    if damage is not None:
        damage(dst)
    return dst


@pytest.mark.parametrize(
    ("damage", "mutate", "rule", "file", "tensor"),
    [case[1:] for case in MATRIX],
    ids=[case[0] for case in MATRIX],
)
def test_bad_input_yields_its_finding(
    tmp_path: Path, pristine: Path, damage, mutate, rule, file, tensor
) -> None:
    dst = damaged(tmp_path, pristine, damage, mutate)
    report = validate_checkpoint(dst, ValidateOptions(scan_weights=True))
    hits = rules_of(report).get(rule, [])
    assert hits, f"no {rule} finding; got {[f.line() for f in report.findings()]}"
    assert any(
        f.severity == "error"
        and (file is None or f.file == file)
        and (tensor is None or f.tensor == tensor)
        for f in hits
    ), [f.line() for f in hits]
    assert report.exit_code == 1
    internal = [f for f in report.findings() if "internal error" in f.message]
    assert internal == []
    # the rule does not fire on the pristine checkpoint (the finding is caused by the damage)
    assert rule not in rules_of(validate_checkpoint(pristine))


ROOT_CAUSE_ONLY = [
    "truncated shard",
    "corrupted header",
    "offsets past EOF",
    "index path traversal",
    "missing shard",
    "extra stale shard",
    "tensor missing",
    "extra tensor",
    "wrong scale shape",
    "E8M0 NaN",
    "inf scale",
    "checksum mismatch",
    "config pattern matching nothing",
]


@pytest.mark.parametrize("case", ROOT_CAUSE_ONLY)
def test_damage_reports_its_root_cause_only(tmp_path: Path, pristine: Path, case: str) -> None:
    """No cascade: a lost shard is one finding, not one per tensor it held."""
    _, damage, mutate, rule, _, _ = next(c for c in MATRIX if c[0] == case)
    dst = damaged(tmp_path, pristine, damage, mutate)
    report = validate_checkpoint(dst, ValidateOptions(scan_weights=True))
    assert set(rules_of(report)) == {rule}, [f.line() for f in report.findings()]


def test_truncated_shard_keeps_the_intact_tensors(tmp_path: Path, pristine: Path) -> None:
    """Tensors before the cut still count as present; only those past it are unreadable."""
    dst = damaged(tmp_path, pristine, truncate_shard, None)
    report = validate_checkpoint(dst, ValidateOptions(scan_weights=True))
    rules = rules_of(report)
    assert set(rules) == {"shard_truncated"}, [f.line() for f in report.findings()]
    (finding,) = rules["shard_truncated"]
    assert "past the end" in finding.message


def test_truncation_inside_the_header(tmp_path: Path, pristine: Path) -> None:
    dst = damaged(tmp_path, pristine, None, None)
    p = dst / SHARD2
    n, _ = read_header_doc(p)
    p.write_bytes(p.read_bytes()[: 8 + n // 2])
    report = validate_checkpoint(dst)
    hits = rules_of(report)["shard_truncated"]
    assert hits[0].file == SHARD2 and "header alone needs" in hits[0].message


def test_e8m0_nan_position_is_reported(tmp_path: Path, pristine: Path) -> None:
    dst = damaged(tmp_path, pristine, e8m0_nan, None)
    (f,) = rules_of(validate_checkpoint(dst))["scale_values"]
    assert "1 of 1536 E8M0" in f.message and "[5, 2]" in f.message


def test_checksum_finding_names_the_changed_file_only(tmp_path: Path, pristine: Path) -> None:
    dst = damaged(tmp_path, pristine, with_manifest_then_edit, None)
    hits = rules_of(validate_checkpoint(dst))["checksums"]
    assert [f.file for f in hits] == [shard_holding(dst, EXPERT0_GATE_SCALE).name]
    assert "sha256" in hits[0].message
