"""``ckpt validate`` through the real entry point: exit codes, formats, no tracebacks."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from validate.factory import build_checkpoint, poke_tensor
from validate.test_bad_inputs import MATRIX, damaged

from checkpoint_tool.cli.app import main
from checkpoint_tool.validate.checks import CHECK_IDS


def run(capsys, *args: str) -> tuple[int, str, str]:
    argv, sys.argv = sys.argv, ["ckpt", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("pristine") / "ckpt")


@pytest.fixture
def ckpt(pristine: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(pristine, dst)
    return dst


def test_clean_checkpoint_exits_0(capsys, pristine: Path) -> None:
    code, out, err = run(capsys, "validate", str(pristine), "--scan-weights")
    assert code == 0, out + err
    assert "PASSED: 0 error(s)" in out and "scale_values" in out


@pytest.mark.parametrize(
    ("damage", "mutate", "rule", "file", "tensor"),
    [case[1:] for case in MATRIX],
    ids=[case[0] for case in MATRIX],
)
def test_matrix_exit_1_one_line_per_finding(
    capsys, tmp_path: Path, pristine: Path, damage, mutate, rule, file, tensor
) -> None:
    dst = damaged(tmp_path, pristine, damage, mutate)
    code, out, err = run(capsys, "validate", str(dst), "--scan-weights")
    assert code == 1, out + err
    assert "Traceback" not in out + err
    lines = [ln for ln in out.splitlines() if ln.startswith(f"error [{rule}]")]
    assert lines, out
    want = ": ".join(p for p in (file, tensor) if p)
    assert any(want in ln for ln in lines), lines


def test_json_format(capsys, ckpt: Path) -> None:
    poke_tensor(ckpt, "model.layers.1.mlp.experts.0.up_proj.weight_scale", 3, b"\xff")
    code, out, _ = run(capsys, "validate", str(ckpt), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["exit_code"] == 1
    failed = [c for c in doc["checks"] if c["status"] == "failed"]
    assert [c["id"] for c in failed] == ["scale_values"]
    (f,) = failed[0]["findings"]
    assert f["tensor"] == "model.layers.1.mlp.experts.0.up_proj.weight_scale"
    assert f["file"] == "model-00002-of-00002.safetensors"


def test_junit_format_and_file(capsys, ckpt: Path, tmp_path: Path) -> None:
    poke_tensor(ckpt, "model.layers.1.mlp.experts.0.up_proj.weight_scale", 3, b"\xff")
    xml_file = tmp_path / "r.xml"
    code, out, _ = run(capsys, "validate", str(ckpt), "-f", "junit", "--junit", str(xml_file))
    assert code == 1
    assert out.strip() == xml_file.read_text().strip()
    cases = ET.fromstring(out).findall(".//testcase")
    assert [c.get("name") for c in cases] == CHECK_IDS


def test_warnings_exit_0_unless_strict(capsys, tmp_path: Path) -> None:
    dst = build_checkpoint(tmp_path / "c", total_size="files")
    code, out, _ = run(capsys, "validate", str(dst))
    assert code == 0 and "warning [total_size]" in out
    code, _, _ = run(capsys, "validate", str(dst), "--strict")
    assert code == 1


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "{missing}"],
        ["validate", "{ckpt}", "--manifest", "{missing}"],
        ["validate", "{ckpt}", "--expect-policy", "{missing}"],
        ["validate", "{ckpt}", "--expect-policy", "{ckpt}/config.json"],
        ["validate", "{ckpt}", "--only", "no_such_rule"],
        ["validate", "{ckpt}", "--format", "yaml"],
        ["validate", "{ckpt}/model-00001-of-00002.safetensors", "--write-manifest"],
        ["validate", "{ckpt}", "--deep", "--deep-layers", "0"],
    ],
    ids=["no path", "no manifest", "no policy", "not a policy", "bad rule", "bad format",
         "manifest of one file", "no deep layers"],
)  # fmt: skip
def test_usage_and_unreadable_input_exit_2(capsys, ckpt: Path, tmp_path: Path, args) -> None:
    subst = {"ckpt": str(ckpt), "missing": str(tmp_path / "nope")}
    code, out, err = run(capsys, *[a.format(**subst) for a in args])
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert err.strip(), "a usage error says what is wrong on stderr"


def test_deep_run(capsys, pristine: Path) -> None:
    code, out, _ = run(
        capsys, "validate", str(pristine), "--deep", "--deep-tokens", "4", "--only", "deep_runtime"
    )
    assert code == 0 and "deep_runtime" in out and "passed" in out


def test_write_manifest_then_check_it(capsys, ckpt: Path) -> None:
    code, out, _ = run(capsys, "validate", str(ckpt), "--write-manifest")
    assert code == 0 and (ckpt / "ckpt-manifest.json").exists()
    assert "manifest written" in out
    code, out, _ = run(capsys, "validate", str(ckpt), "--format", "json")
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 0 and checks["checksums"]["status"] == "passed"
    (ckpt / "config.json").write_text((ckpt / "config.json").read_text() + " ")
    code, out, _ = run(capsys, "validate", str(ckpt))
    assert code == 1 and "error [checksums] config.json: size" in out


def test_write_manifest_refused_when_broken(capsys, ckpt: Path) -> None:
    poke_tensor(ckpt, "model.layers.1.mlp.experts.0.up_proj.weight_scale", 0, b"\xff")
    code, out, _ = run(capsys, "validate", str(ckpt), "--write-manifest")
    assert code == 1 and not (ckpt / "ckpt-manifest.json").exists()
    assert "error [write_manifest]" in out
