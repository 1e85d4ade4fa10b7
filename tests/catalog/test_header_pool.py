"""``header_pool.read_headers`` (a forked child reads from the front, this process from the
back) gives exactly what the careful read (``read_serial``, every header in this process)
gives: same files, index and headers; and where anything is off the catalog reports what the
careful read reports."""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
from pathlib import Path

import pytest

from checkpoint_tool.catalog import header_pool, open_local
from checkpoint_tool.catalog.header_pool import MIN_FILES, read_headers, read_serial
from checkpoint_tool.catalog.safetensors_format import read_header
from checkpoint_tool.errors import InputError


def _shard(path: Path, tensors: dict[str, tuple[str, list[int]]], metadata=None) -> Path:
    doc: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = {"BF16": 2, "F32": 4, "U8": 1}[dtype]
        for d in shape:
            n *= d
        doc[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(doc).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + random.randbytes(offset))
    return path


def _shards(tmp_path: Path, count: int) -> list[Path]:
    rng = random.Random(count)
    paths = []
    for i in range(count):
        tensors = {
            f"model.layers.{i}.mlp.experts.{e}.w{k}.weight": (
                rng.choice(["BF16", "F32", "U8"]),
                [rng.randint(1, 9), rng.randint(1, 9)],
            )
            for e in range(rng.randint(1, 6))
            for k in (1, 2, 3)
        }
        paths.append(_shard(tmp_path / f"s-{i:05d}.safetensors", tensors, {"i": str(i)}))
    return paths


def _same(a, b) -> bool:
    return (a.path, a.header_len, a.file_size, a.entries, a.metadata) == (
        b.path,
        b.header_len,
        b.file_size,
        b.entries,
        b.metadata,
    )


#: where a forked helper must run (CI: Linux, 2 cores)
FORKS = sys.platform == "linux" and (os.cpu_count() or 1) >= 2


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_two_processes_read_what_one_reads(tmp_path, delay):
    """A folder without an index: every shard, in order, as ``read_header`` reads it (with no
    other work here this process reads most from the back; with 0.3 s the child most)."""
    paths = _shards(tmp_path, 2 * MIN_FILES + 3)
    called = []
    got = read_headers(tmp_path, False, lambda: called.append(1) or time.sleep(delay))
    assert called == [1]
    if not FORKS:
        assert got is None
        return
    assert got is not None and got.index_doc is None
    assert got.files == [p.name for p in paths]
    assert all(_same(h, read_header(p)) for h, p in zip(got.headers, paths, strict=True))


def test_few_shards_are_read_here(tmp_path):
    _shards(tmp_path, MIN_FILES - 1)
    called = []
    assert read_headers(tmp_path, False, lambda: called.append(1)) is None
    assert called == [1]


@pytest.mark.parametrize("bad_at", [0, MIN_FILES // 2, MIN_FILES + 1, 2 * MIN_FILES - 1])
def test_first_error_wins_and_ends_the_list(tmp_path, bad_at):
    paths = _shards(tmp_path, 2 * MIN_FILES)
    for later in (bad_at, min(bad_at + 2, len(paths) - 1)):  # two broken files
        paths[later].write_bytes(b"\x05\x00")
    assert read_headers(tmp_path, False, None) is None  # the careful read reports it
    out = read_serial(paths)
    assert len(out) == bad_at + 1
    assert isinstance(out[-1], InputError)
    with pytest.raises(InputError) as serial:
        read_header(paths[bad_at])
    assert out[-1].message == serial.value.message
    assert out[-1].exit_code == serial.value.exit_code
    assert all(_same(h, read_header(p)) for h, p in zip(out[:-1], paths, strict=False))
    with pytest.raises(InputError) as opened:
        open_local(tmp_path)
    assert opened.value.message == serial.value.message


def test_child_failure_falls_back_to_this_process(tmp_path, monkeypatch):
    paths = _shards(tmp_path, 2 * MIN_FILES)
    _index(tmp_path, paths)
    careful = _careful(tmp_path, monkeypatch)
    monkeypatch.setattr(header_pool, "_child", lambda *a: 1 / 0)  # the child crashes
    assert read_headers(tmp_path, True, None) is None
    cat = open_local(tmp_path, meanwhile=lambda: None)
    assert list(cat.tensors.items()) == list(careful.tensors.items())


def test_catalog_reports_the_earlier_duplicate_before_a_later_broken_shard(tmp_path):
    paths = _shards(tmp_path, 2 * MIN_FILES)
    name = read_header(paths[0]).entries[0][0]
    _shard(paths[3], {name: ("BF16", [2, 2])})  # shard 3 repeats a tensor of shard 0
    paths[-1].write_bytes(b"\x05\x00")  # and the last shard is truncated
    with pytest.raises(InputError, match="also appears in"):
        open_local(tmp_path)


def _careful(root: Path, monkeypatch):
    """The catalog of the careful read (no child), or its ``InputError``."""
    with monkeypatch.context() as m:
        m.setenv("CKPT_NO_FORK", "1")
        try:
            return open_local(root)
        except InputError as exc:
            return exc


def _index(tmp_path: Path, paths: list[Path]) -> None:
    weight_map = {name: p.name for p in paths for name, *_ in read_header(p).entries}
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def test_stale_shard_next_to_the_index_is_never_reported(tmp_path):
    paths = _shards(tmp_path, 2 * MIN_FILES)
    _index(tmp_path, paths)
    (tmp_path / "zz-stale.safetensors").write_bytes(b"\x05\x00")  # the child's share, not indexed
    cat = open_local(tmp_path)
    assert cat.files == [p.name for p in paths]
    assert len(cat.tensors) == sum(len(read_header(p).entries) for p in paths)


def test_bad_index_while_the_child_parses(tmp_path):
    _shards(tmp_path, 2 * MIN_FILES)
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        open_local(tmp_path)


def test_indexed_shard_broken_in_the_childs_share(tmp_path):
    paths = _shards(tmp_path, 2 * MIN_FILES)
    _index(tmp_path, paths)
    paths[-2].write_bytes(b"\x05\x00")
    with pytest.raises(InputError, match=paths[-2].name):
        open_local(tmp_path)


def test_an_unread_child_is_stopped_when_dropped():
    from checkpoint_tool.forked import Forked, can_fork

    if not can_fork():
        pytest.skip("no second core or fork here")
    child = Forked(lambda: b"x" * (1 << 22))  # larger than a pipe: it blocks writing
    pid = child.pid
    del child
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped already: no such child


def test_the_childs_answer_survives_marshal(tmp_path):
    """The child's records are sent with ``marshal``: every field must be a plain type, or
    the answer is dropped and this process silently parses every file itself."""
    import marshal

    paths = _shards(tmp_path, 4)
    records = marshal.loads(marshal.dumps([header_pool._record(read_header(p)) for p in paths]))
    back = [header_pool._header(p, rec) for p, rec in zip(paths, records, strict=True)]
    assert all(_same(a, read_header(p)) for a, p in zip(back, paths, strict=True))
    assert all(a.columns == read_header(p).columns for a, p in zip(back, paths, strict=True))


# -- with an index: the child reads it and holds every header against it --


def _open_both(root: Path, monkeypatch):
    """The catalog opened with a child and by the careful read, or the ``InputError`` of
    each."""
    try:
        with_child = open_local(root, meanwhile=lambda: None)
    except InputError as exc:
        with_child = exc
    return with_child, _careful(root, monkeypatch)


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_a_verified_read_equals_the_careful_one(tmp_path, monkeypatch, delay):
    """With no other work here this process reads most shards from the back; with 0.3 s of
    it the child reads most from the front: either way the catalog is the careful read's."""
    paths = _shards(tmp_path, 2 * MIN_FILES)
    _index(tmp_path, paths)
    if FORKS:
        taken = []
        real = header_pool.read_headers
        monkeypatch.setattr(
            "checkpoint_tool.catalog.local.read_headers",
            lambda *a: ((got := real(*a)) is not None and taken.append(1)) or got,
        )
    called = []
    with_child = open_local(tmp_path, meanwhile=lambda: called.append(1) or time.sleep(delay))
    careful = _careful(tmp_path, monkeypatch)
    assert called == [1] and (not FORKS or taken == [1])
    assert list(with_child.tensors.items()) == list(careful.tensors.items())
    assert (with_child.files, with_child.index) == (careful.files, careful.index)
    assert with_child.headers == careful.headers
    assert with_child.header_bytes_read == careful.header_bytes_read


@pytest.mark.parametrize("defect", ["broken", "unindexed", "misfiled", "unlisted", "duplicate"])
@pytest.mark.parametrize("end", ["front", "back"])
def test_what_the_readers_find_off_is_reported_as_the_careful_read_reports_it(
    tmp_path, monkeypatch, defect, end
):
    """The child reads shards from the front, this process from the back: a defect at
    either end is found and reported as the careful read reports it."""
    paths = _shards(tmp_path, 2 * MIN_FILES)
    if end == "back":
        paths = paths[::-1]
    _index(tmp_path, paths)
    index = tmp_path / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    first = read_header(paths[0]).entries[0][0]
    if defect == "broken":
        paths[1].write_bytes(b"\x05\x00")
    elif defect == "unindexed":  # a tensor of a shard is missing from the index
        del doc["weight_map"][first]
    elif defect == "misfiled":  # the index puts it in another shard
        doc["weight_map"][first] = paths[1].name
    elif defect == "unlisted":  # the index names a tensor no shard holds
        doc["weight_map"]["ghost.weight"] = paths[0].name
    else:  # shard 3 repeats a tensor of shard 0
        _shard(paths[3], {first: ("BF16", [2, 2])})
        doc["weight_map"] = {
            n: p.name for p in paths for n, *_ in read_header(p).entries
        }  # the index follows the last copy
    index.write_text(json.dumps(doc))
    with_child, careful = _open_both(tmp_path, monkeypatch)
    assert isinstance(careful, InputError)
    assert isinstance(with_child, InputError) and with_child.message == careful.message


@pytest.mark.parametrize("stale", ["valid", "broken"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_a_stale_shard_is_left_out_of_a_verified_read(tmp_path, monkeypatch, stale, where):
    """A shard the index does not name, at either end of the listing (where the child or
    this process starts reading): the verified read leaves it out as the careful read does,
    readable or not."""
    paths = _shards(tmp_path, 2 * MIN_FILES)
    odd = paths[0] if where == "first" else paths[-1]
    _index(tmp_path, [p for p in paths if p != odd])
    if stale == "broken":
        odd.write_bytes(b"\x05\x00")
    with_child, careful = _open_both(tmp_path, monkeypatch)
    assert not isinstance(careful, InputError) and not isinstance(with_child, InputError)
    assert odd.name not in careful.files
    assert (with_child.files, with_child.index) == (careful.files, careful.index)
    assert list(with_child.tensors.items()) == list(careful.tensors.items())
    assert with_child.headers == careful.headers
