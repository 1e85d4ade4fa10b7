"""``ckpt verify --part I/N`` on every I, then ``--merge``: the lossless verdict and counts of a
single-host ``ckpt verify --no-numeric``; a corrupted byte is found by the part that owns it."""

from __future__ import annotations

import json

import pytest
from main_run import run_main as _run

from checkpoint_tool.catalog import open_local

COUNTS = ("files_checked", "tensors_checked", "tensors_padded", "bytes_compared")


@pytest.fixture
def converted(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = str(synth_ckpt("quark-hybrid"))
    dst = tmp_path / "out"
    code, _, err = _run(monkeypatch, capsys, "convert", src, str(dst), "--tp", "2",
                        "--max-shard-size", "1MB", "--no-progress")  # fmt: skip
    assert code == 0, err
    return src, dst


def _spread(monkeypatch, capsys, src, dst, tmp_path, n: int) -> tuple[list[int], int, dict]:
    codes = []
    for i in range(n):
        code, out, err = _run(monkeypatch, capsys, "verify", str(dst), "-s", src, "--no-numeric",
                              "--part", f"{i}/{n}", "-f", "json")  # fmt: skip
        assert code in (0, 1), err
        (tmp_path / f"v{i}.json").write_text(out)
        codes.append(code)
    code, out, err = _run(monkeypatch, capsys, "verify", str(dst), "-s", src, "--merge",
                          str(tmp_path / "v*.json"), "-f", "json")  # fmt: skip
    return codes, code, json.loads(out)


def test_parts_merge_to_the_single_host_verdict(monkeypatch, capsys, converted, tmp_path):
    src, dst = converted
    code, out, err = _run(monkeypatch, capsys, "verify", str(dst), "-s", src, "--no-numeric",
                          "-f", "json")  # fmt: skip
    assert code == 0, err
    one = json.loads(out)["lossless"]
    codes, code, merged = _spread(monkeypatch, capsys, src, dst, tmp_path, 3)
    assert codes == [0, 0, 0] and code == 0 and merged["passed"]
    assert {k: merged["lossless"][k] for k in COUNTS} == {k: one[k] for k in COUNTS}
    assert one["files_checked"] >= 3


def test_a_corrupted_byte_fails_its_part_and_the_merge(monkeypatch, capsys, converted, tmp_path):
    src, dst = converted
    cat = open_local(dst)
    name, entry = sorted(cat.tensors.items())[len(cat.tensors) // 2]
    path = cat.path_of(entry)
    data = bytearray(path.read_bytes())
    data[entry.begin] ^= 0xFF
    path.write_bytes(bytes(data))
    codes, code, merged = _spread(monkeypatch, capsys, src, dst, tmp_path, 2)
    assert sorted(codes) == [0, 1] and code == 1 and not merged["passed"]
    assert [m["tensor"] for m in merged["lossless"]["mismatches"]] == [name]


def test_merge_names_a_missing_part(monkeypatch, capsys, converted, tmp_path):
    src, dst = converted
    code, out, _ = _run(monkeypatch, capsys, "verify", str(dst), "-s", src, "--no-numeric",
                        "--part", "1/3", "-f", "json")  # fmt: skip
    (tmp_path / "v1.json").write_text(out)
    code, _, err = _run(monkeypatch, capsys, "verify", str(dst), "-s", src, "--merge",
                        str(tmp_path / "v1.json"))  # fmt: skip
    assert code == 2 and "part 0/3 is missing" in err and err.strip().count("\n") == 0


def test_part_needs_no_numeric(monkeypatch, capsys, converted):
    src, dst = converted
    code, _, err = _run(monkeypatch, capsys, "verify", str(dst), "-s", src, "--part", "0/2")
    assert code == 2 and "--no-numeric" in err
