"""Every failure gives one line, a CkptError, and nothing incomplete under a final name."""

from __future__ import annotations

import copy
import errno
import os
import resource

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import CkptError, InputError, OutputError
from checkpoint_tool.execute import execute_plan, hashed_output, runner
from checkpoint_tool.execute import source as source_mod
from checkpoint_tool.plan.model import OutputTensor, Piece

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source


@pytest.fixture
def setup(tmp_path):
    root = write_source(tmp_path / "src", tiny_moe_tensors(seed=4))
    return root, tiny_plan(root), open_local(root)


def assert_clean(dst, plan) -> None:
    """No weight file, no manifest, no temporary left behind."""
    names = set(tree_bytes(dst)) if dst.exists() else set()
    assert not names & {f.name for f in plan.files}
    assert "ckpt-manifest.json" not in names
    assert not [n for n in names if n.endswith(".partial")]


def one_line(exc: CkptError) -> str:
    assert "\n" not in exc.message
    return exc.message


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("zero_copy_min", [1 << 30, 64])
def test_disk_full_is_one_line_and_leaves_no_partial_file(
    setup, tmp_path, monkeypatch, workers, zero_copy_min
):
    _, plan, cat = setup
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", zero_copy_min)
    real_pwrite, real_copy = os.pwrite, os.copy_file_range

    def full(fd):
        if _fd_path(fd).endswith("-of-00003.safetensors.partial"):
            raise OSError(errno.ENOSPC, "No space left on device")

    def pwrite(fd, data, offset):
        full(fd)
        return real_pwrite(fd, data, offset)

    def copy_file_range(src, dst, count, offset_src=None, offset_dst=None):
        full(dst)
        return real_copy(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "copy_file_range", copy_file_range)
    with pytest.raises(OutputError) as err:
        execute_plan(plan, cat, tmp_path / "dst", progress=False, workers=workers)
    assert "disk full" in one_line(err.value) and "--resume" in err.value.message
    assert_clean(tmp_path / "dst", plan)


def test_file_size_limit_in_a_child_process(setup, tmp_path):
    """RLIMIT_FSIZE makes writes fail with EFBIG (SIGXFSZ is ignored by Python)."""
    _, plan, cat = setup
    dst = tmp_path / "dst"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))
            execute_plan(plan, cat, dst, progress=False)
        except CkptError as exc:
            os.write(write_end, exc.message.encode())
            code = exc.exit_code
        except BaseException as exc:
            os.write(write_end, repr(exc).encode())
            code = 99
        os._exit(code)
    os.close(write_end)
    message = os.read(read_end, 4096).decode()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 2, message
    assert "file too large" in message and "\n" not in message
    assert_clean(dst, plan)


def test_source_changed_since_planning(setup, tmp_path):
    root, plan, cat = setup
    shard = root / "model-00001-of-00002.safetensors"
    with open(shard, "ab") as fh:
        fh.write(b"\0" * 8)
    with pytest.raises(InputError, match="changed since it was planned") as err:
        execute_plan(plan, cat, tmp_path / "dst", progress=False)
    assert str(shard) in one_line(err.value)
    assert not (tmp_path / "dst").exists()


def test_source_rewritten_with_a_different_header(setup, tmp_path):
    root, plan, cat = setup
    from safetensors.torch import load_file, save_file

    shard = root / "model-00002-of-00002.safetensors"
    tensors = load_file(shard)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].flatten()  # same bytes, same size, new shape
    save_file(tensors, shard, metadata={"format": "pt"})
    with pytest.raises(InputError, match="changed since it was planned"):
        execute_plan(plan, cat, tmp_path / "dst", progress=False)


def test_source_changed_during_the_run(setup, tmp_path, monkeypatch):
    root, plan, cat = setup
    real_read = source_mod.RangeReader.read

    def touching_read(self, rel, offset, nbytes):
        os.utime(root / rel, ns=(1, 1))
        return real_read(self, rel, offset, nbytes)

    monkeypatch.setattr(source_mod.RangeReader, "read", touching_read)
    with pytest.raises(InputError, match="changed during conversion") as err:
        execute_plan(plan, cat, tmp_path / "dst", progress=False)
    one_line(err.value)
    assert_clean(tmp_path / "dst", plan)


@pytest.mark.parametrize("zero_copy_min", [1 << 30, 64])
def test_read_error_is_one_line(setup, tmp_path, monkeypatch, zero_copy_min):
    root, plan, cat = setup
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", zero_copy_min)

    def failing(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "preadv", failing)
    monkeypatch.setattr(os, "copy_file_range", failing)
    with pytest.raises(InputError, match="Input/output error") as err:
        execute_plan(plan, cat, tmp_path / "dst", progress=False)
    assert str(root) in one_line(err.value) and "re-download" in err.value.message
    assert_clean(tmp_path / "dst", plan)


def test_source_truncated_while_copying(setup, tmp_path, monkeypatch):
    """copy_file_range returning 0 (the source ended) is reported, never a short file."""
    _, plan, cat = setup
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", 64)
    monkeypatch.setattr(os, "copy_file_range", lambda *a, **k: 0)
    with pytest.raises(InputError, match="before the data its header promises") as err:
        execute_plan(plan, cat, tmp_path / "dst", progress=False)
    one_line(err.value)
    assert_clean(tmp_path / "dst", plan)


def test_missing_source_shard(setup, tmp_path):
    root, plan, cat = setup
    (root / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(InputError, match="cannot open"):
        execute_plan(plan, cat, tmp_path / "dst", progress=False)
    assert not (tmp_path / "dst").exists()


def test_truncated_source_shard(setup, tmp_path):
    root, plan, cat = setup
    shard = root / "model-00001-of-00002.safetensors"
    os.truncate(shard, shard.stat().st_size - 16)
    with pytest.raises(InputError, match=r"changed since it was planned|truncated"):
        execute_plan(plan, cat, tmp_path / "dst", progress=False)
    assert not (tmp_path / "dst").exists()


def test_inconsistent_plan_fails_before_dst_is_touched(setup, tmp_path):
    _, plan, cat = setup
    bad = copy.deepcopy(plan)
    bad.files[1].tensors.append(
        OutputTensor(name="x", dtype="BF16", shape=[3], pieces=[Piece(source="model.norm.weight")])
    )
    with pytest.raises(InputError, match="x: pieces give storage shape"):
        execute_plan(bad, cat, tmp_path / "dst", progress=False)
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: p.files[1].__setattr__("name", p.files[0].name), "planned twice"),
        (lambda p: p.files[0].__setattr__("name", "../escape.safetensors"), "inside DST"),
        (lambda p: p.files[0].__setattr__("name", "weights.bin"), "must end in .safetensors"),
        (lambda p: p.side_files.append("ckpt-manifest.json"), "would overwrite"),
        (lambda p: p.side_files.append("missing.txt"), "missing"),
        (lambda p: p.files[2].tensors.append(p.files[0].tensors[0]), "planned in"),
    ],
)
def test_plan_level_errors(setup, tmp_path, mutate, message):
    _, plan, cat = setup
    bad = copy.deepcopy(plan)
    mutate(bad)
    with pytest.raises(InputError, match=message) as err:
        execute_plan(bad, cat, tmp_path / "dst", progress=False)
    one_line(err.value)
    assert not (tmp_path / "dst").exists()


def _first(plan):
    return plan.files[0].tensors[0]


@pytest.mark.parametrize("collide", [False, True], ids=["hashes", "every-hash-equal"])
def test_a_repeated_name_is_named_with_both_files(setup, monkeypatch, collide):
    _, plan, cat = setup
    if collide:  # a hash collision is never taken for a repeat; a repeat is still found
        monkeypatch.setattr(runner, "hash", lambda _: 7, raising=False)
    runner.check_plan(plan, cat)
    bad = copy.deepcopy(plan)
    bad.files[2].tensors.insert(1, _first(bad))
    bad.files[2].tensors.append(bad.files[1].tensors[0])  # later in the plan: not the one named
    f0, f2 = bad.files[0].name, bad.files[2].name
    with pytest.raises(InputError, match=f"^{_first(bad).name}: planned in {f0} and {f2}; re-plan"):
        runner.check_plan(bad, cat)
    bad = copy.deepcopy(plan)
    bad.files[1].tensors.append(bad.files[1].tensors[0])
    f1 = bad.files[1].name
    with pytest.raises(InputError, match=f"planned in {f1} and {f1}; re-plan"):
        runner.check_plan(bad, cat)


@pytest.mark.parametrize("collide", [False, True], ids=["hashes", "every-hash-equal"])
def test_a_name_may_repeat_on_another_rank(setup, monkeypatch, collide):
    _, plan, cat = setup
    if collide:
        monkeypatch.setattr(runner, "hash", lambda _: 7, raising=False)
    ranked = copy.deepcopy(plan)
    for rank, f in enumerate(ranked.files):
        f.rank = rank % 2
    ranked.files[1].tensors.append(_first(ranked))  # rank 1: allowed
    runner.check_plan(ranked, cat)
    ranked.files[2].tensors.append(_first(ranked))  # rank 0 again: refused
    with pytest.raises(InputError, match=f"planned in {ranked.files[0].name} and "):
        runner.check_plan(ranked, cat)
