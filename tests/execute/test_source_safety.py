"""The source is never written, deleted or read outside SRC, and a source changed under a run
is one line naming the shard: DST that is SRC (by any name), inside SRC or holding SRC is
refused before anything is touched; side files linked out of SRC are refused; a shard changed
between a kill and --resume, or between two parts, stops the run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.cli.app import main
from checkpoint_tool.errors import InputError, OutputError
from checkpoint_tool.execute import execute_plan
from checkpoint_tool.execute.distributed.parts import execute_part, finalize
from checkpoint_tool.execute.manifest import JOURNAL_NAME
from checkpoint_tool.execute.paths import check_apart

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source
from .test_crash_points import killed_at


@pytest.fixture
def src(tmp_path):
    root = write_source(tmp_path / "src", tiny_moe_tensors(seed=3))
    return root, tiny_plan(root)


def _dst_names(root: Path, tmp_path: Path) -> list[Path]:
    (tmp_path / "link").symlink_to(root)
    return [root, root / ".", root / ".." / root.name, tmp_path / "link", root / "out",
            root / "sub" / ".." / "out", tmp_path / "link" / "out", tmp_path]  # fmt: skip


def test_dst_that_is_inside_or_holds_src_is_refused_and_nothing_is_touched(src, tmp_path):
    root, plan = src
    execute_plan(plan, open_local(root), tmp_path / "old", progress=False)  # a ckpt output
    for dst in _dst_names(root, tmp_path):
        before = tree_bytes(tmp_path)
        for kw in ({}, {"overwrite": True}, {"resume": True}):
            with pytest.raises(OutputError, match="source") as err:
                execute_plan(plan, open_local(root), dst, progress=False, **kw)
            assert "\n" not in err.value.message
        for run in (
            lambda d: execute_part(plan, open_local(root), d, 0, 2, progress=False),
            lambda d: finalize(plan, open_local(root), d, progress=False),
        ):
            with pytest.raises(OutputError, match="source"):
                run(dst)
        assert tree_bytes(tmp_path) == before, dst


def test_a_converted_output_as_its_own_source_is_refused(src, tmp_path):
    """``convert OUT OUT --overwrite`` once deleted every file of OUT."""
    root, plan = src
    out = tmp_path / "out"
    execute_plan(plan, open_local(root), out, progress=False)
    before = tree_bytes(out)
    for dst in (out, out / ".", tmp_path / "x" / ".." / "out"):
        with pytest.raises(OutputError, match="same folder"):
            execute_plan(plan, open_local(out), dst, progress=False, overwrite=True)
    assert tree_bytes(out) == before


def test_bind_equal_folders_are_compared_by_inode(tmp_path, monkeypatch):
    """Two names realpath cannot join (a bind mount) are caught by device and inode."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    real_stat = os.stat

    def stat(p, *args, **kw):  # type: ignore[no-untyped-def]
        return real_stat(a if Path(p) == b else p, *args, **kw)

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(OutputError, match="same folder"):
        check_apart(a, b)
    with pytest.raises(OutputError, match="inside the source"):
        check_apart(a, b / "out")


def test_a_side_file_linked_out_of_src_is_refused(src, tmp_path):
    root, plan = src
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (root / "tokenizer.json").unlink()
    (root / "tokenizer.json").symlink_to(secret)
    dst = tmp_path / "dst"
    with pytest.raises(InputError, match=r"tokenizer\.json: links to .*outside the source"):
        execute_plan(plan, open_local(root), dst, progress=False)
    assert not dst.exists()


def test_a_side_file_linked_inside_src_is_copied(src, tmp_path):
    root, plan = src
    (root / "tokenizer.json").rename(root / "sub" / "tok.json")
    (root / "tokenizer.json").symlink_to(Path("sub") / "tok.json")
    execute_plan(plan, open_local(root), tmp_path / "dst", progress=False)
    assert (tmp_path / "dst" / "tokenizer.json").read_bytes() == (
        root / "sub/tok.json"
    ).read_bytes()


def _change_a_tensor_keeping_size_and_header(root: Path, *, keep_mtime: bool) -> str:
    shard = sorted(root.glob("model-*.safetensors"))[0]
    st = shard.stat()
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    return shard.name


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_resume_after_the_source_changed_is_refused(src, tmp_path, keep_mtime):
    root, plan = src
    dst = tmp_path / "dst"
    killed_at(lambda: execute_plan(plan, open_local(root), dst, progress=False), 40)
    assert (dst / JOURNAL_NAME).exists()
    name = _change_a_tensor_keeping_size_and_header(root, keep_mtime=keep_mtime)
    before = tree_bytes(dst)
    with pytest.raises(InputError, match=rf"{name}: source shard changed .*--overwrite") as err:
        execute_plan(plan, open_local(root), dst, progress=False, resume=True)
    assert "\n" not in err.value.message
    assert tree_bytes(dst) == before
    execute_plan(plan, open_local(root), dst, progress=False, overwrite=True)
    execute_plan(plan, open_local(root), tmp_path / "fresh", progress=False)
    assert tree_bytes(dst) == tree_bytes(tmp_path / "fresh")


def test_parts_of_two_versions_of_the_source_are_refused(src, tmp_path):
    root, plan = src
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    execute_part(plan, open_local(root), dst, 1, 2, progress=False)
    name = _change_a_tensor_keeping_size_and_header(root, keep_mtime=False)
    with pytest.raises(InputError, match=rf"{name}: source shard changed since part \d/2"):
        finalize(plan, open_local(root), dst, progress=False)
    assert not (dst / "ckpt-manifest.json").exists()


def test_a_later_part_sees_the_change_an_earlier_part_did_not(src, tmp_path):
    root, plan = src
    dst = tmp_path / "dst"
    execute_part(plan, open_local(root), dst, 0, 2, progress=False)
    _change_a_tensor_keeping_size_and_header(root, keep_mtime=True)
    with pytest.raises(InputError, match="source shard changed since part 0/2 read it"):
        execute_part(plan, open_local(root), dst, 1, 2, progress=False)


def _cli(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["ckpt", "convert", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code or 0), capsys.readouterr().err


def test_cli_convert_out_out_overwrite_keeps_every_file(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = synth_ckpt("quark-hybrid")
    out = tmp_path / "out"
    code, err = _cli(monkeypatch, capsys, str(src), str(out), "--tp", "2", "--no-progress")
    assert code == 0, err
    before = tree_bytes(out)
    (tmp_path / "link").symlink_to(out)
    for dst in (str(out), f"{out}/.", str(tmp_path / "link"), f"{out}/sub"):
        code, err = _cli(monkeypatch, capsys, str(out), dst, "--tp", "2", "--overwrite",
                         "--no-progress")  # fmt: skip
        assert code == 2 and err.count("\n") == 1 and "source" in err, err
    assert tree_bytes(out) == before


def test_content_id_of_a_large_shard_samples_its_blocks(tmp_path, monkeypatch):
    from checkpoint_tool.execute import source_identity as si

    monkeypatch.setattr(si, "FULL_HASH_MAX", 1 << 16)
    path = tmp_path / "big"
    data = bytearray(os.urandom(si.SAMPLES * si.SAMPLE_BYTES * 3))
    path.write_bytes(data)

    def cid() -> str:
        fd = os.open(path, os.O_RDONLY)
        try:
            return si.content_id(fd, len(data))
        finally:
            os.close(fd)

    first = cid()
    assert first.startswith("sample:") and cid() == first
    data[len(data) // 2] ^= 1  # the middle block is not sampled for an even count...
    data[-1] ^= 1  # ...the last one is
    path.write_bytes(data)
    assert cid() != first


def test_an_earlier_output_inside_src_is_no_side_file(src, tmp_path):
    """A ckpt output moved into SRC (finished, interrupted, or parts) is not copied along."""
    root, plan = src
    execute_plan(plan, open_local(root), tmp_path / "out", progress=False)
    (tmp_path / "out").rename(root / "out")
    (root / "run").mkdir()
    (root / "run" / JOURNAL_NAME).write_text("{}")
    (root / "run" / "config.json").write_text("{}")
    (root / "parts" / "deep").mkdir(parents=True)
    (root / "parts" / ".ckpt-part-0000-of-0002.json").write_text("{}")
    (root / "parts" / "deep" / "tokenizer.json").write_text("{}")
    side = open_local(root).side_files
    assert "tokenizer.json" in side and "sub/chat_template.jinja" in side
    assert not [f for f in side if f.startswith(("out/", "run/", "parts/"))], side


def test_a_change_during_the_run_with_mtime_put_back_never_gets_a_manifest(src, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    """Size and mtime are re-checked at every commit; the content id once more before the
    manifest, which catches an edit whose mtime was restored."""
    from checkpoint_tool.execute import file_run

    root, plan = src
    real = file_run.FileRun.write_others

    def edit_then_write_others(self, names, catalog):  # type: ignore[no-untyped-def]
        _change_a_tensor_keeping_size_and_header(root, keep_mtime=True)
        return real(self, names, catalog)

    monkeypatch.setattr(file_run.FileRun, "write_others", edit_then_write_others)
    dst = tmp_path / "dst"
    with pytest.raises(
        InputError,
        match=r"model-00001-of-00002\.safetensors: .*changed during conversion \(content\)",
    ):
        execute_plan(plan, open_local(root), dst, progress=False)
    assert not (dst / "ckpt-manifest.json").exists()
    monkeypatch.undo()
    with pytest.raises(InputError, match="source shard changed since the interrupted run"):
        execute_plan(plan, open_local(root), dst, progress=False, resume=True)
