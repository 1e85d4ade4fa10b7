"""``ckpt verify --part I/N`` and ``--merge`` on a requantized output: the parts rebuild the plan
with the requantization DST records, so they agree with a single-host ``verify --no-numeric``;
a requantized byte changed in DST is found by the part that owns it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_local
from tests.main_run import run_main

COUNTS = ("files_checked", "tensors_checked", "tensors_padded", "bytes_compared")
#: a fused slot written from layer 1's requantized BF16 shared down projection
SLOT = "model.layers.1.mlp.experts.8.down_proj.weight"


def _spread(monkeypatch, capsys, src: Path, dst: Path, tmp: Path, n: int):  # type: ignore[no-untyped-def]
    codes = []
    for i in range(n):
        code, out, err = run_main(monkeypatch, capsys, "verify", str(dst), "-s", str(src),
                                  "--no-numeric", "--part", f"{i}/{n}", "-f", "json")  # fmt: skip
        assert code in (0, 1), err
        (tmp / f"v{i}.json").write_text(out)
        codes.append(code)
    code, out, err = run_main(monkeypatch, capsys, "verify", str(dst), "-s", str(src), "--merge",
                              str(tmp / "v*.json"), "-f", "json")  # fmt: skip
    return codes, code, json.loads(out)


@pytest.mark.slow
def test_parts_of_a_requantized_output_merge_to_the_single_host_verdict(  # type: ignore[no-untyped-def]
    monkeypatch, capsys, hybrid: Path, converted: Path, tmp_path: Path
) -> None:
    code, out, err = run_main(monkeypatch, capsys, "verify", str(converted), "-s", str(hybrid),
                              "--no-numeric", "-f", "json")  # fmt: skip
    assert code == 0, err
    one = json.loads(out)["lossless"]
    codes, code, merged = _spread(monkeypatch, capsys, hybrid, converted, tmp_path, 2)
    assert codes == [0, 0] and code == 0 and merged["passed"], merged["lossless"]
    assert {k: merged["lossless"][k] for k in COUNTS} == {k: one[k] for k in COUNTS}
    assert merged["lossless"]["plan_matches_manifest"]


@pytest.mark.slow
def test_a_changed_requantized_byte_fails_its_part(  # type: ignore[no-untyped-def]
    monkeypatch, capsys, hybrid: Path, converted: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "out"
    shutil.copytree(converted, dst)
    cat = open_local(dst)
    entry = cat.tensors[SLOT]
    path = cat.path_of(entry)
    data = bytearray(path.read_bytes())
    data[entry.begin] ^= 0x11
    path.write_bytes(bytes(data))
    codes, code, merged = _spread(monkeypatch, capsys, hybrid, dst, tmp_path, 2)
    assert sorted(codes) == [0, 1] and code == 1 and not merged["passed"]
    assert [m["tensor"] for m in merged["lossless"]["mismatches"]] == [SLOT]
