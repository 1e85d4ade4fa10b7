"""Read a folder's safetensors headers on two cores: this process and one forked child.

Parsing a header is pure Python work (JSON, then the checks of ``read_header``): ~0.3 s for
the 163 shards / 92k tensors of DeepSeek-R1, and ~0.1 s more for the index.

``read_headers(root, indexed, meanwhile)``: a forked child reads the index (where there is
one) and then the shards from the front of the folder's sorted listing, while this process,
once ``meanwhile`` is done (e.g. importing what comes next), reads them from the back; they
meet where their claims cross (``_Meeting``: a shared page, no locks), so the split follows
however long ``meanwhile`` takes. The child checks every header it read against the index,
name by name, and tells this process what the index maps to each other shard. The answer is
the files, the index (without its ``weight_map``) and the headers, or None when anything is
off or no child ran: the caller then reads it all itself (``read_serial``), the careful way,
and reports the precise error. It is the one way: a fixed split (a child given 70% of the
shards up front, the index read and checked here) was dropped for it, on the figures of
``benchmarks/bench_headers.py`` (docs/inspect.md).

Example::

    got = read_headers(root, indexed=True, meanwhile=import_planner)
    got.files[0], len(got.headers)   # ('model-00001-of-000163.safetensors', 163)
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from array import array
from collections.abc import Callable
from itertools import repeat
from operator import eq
from pathlib import Path
from typing import NamedTuple

from checkpoint_tool.catalog.index import INDEX_NAME, files_from_index, read_json_if_present
from checkpoint_tool.catalog.safetensors_format import FileHeader, HeaderColumns, read_header
from checkpoint_tool.errors import InputError
from checkpoint_tool.forked import Forked, can_fork

#: fewer shards than this are read here: a fork and a pipe cost ~10 ms
MIN_FILES = 16

Result = FileHeader | InputError


class Headers(NamedTuple):
    """A folder's shards, every header read (and, with an index, held against it): ``files``
    (sorted), ``index_doc`` (the index's top-level object without ``weight_map``; None
    without an index), ``headers`` (one per file, in order)."""

    files: list[str]
    index_doc: dict | None
    headers: list[FileHeader]


def read_headers(
    root: Path, indexed: bool, meanwhile: Callable[[], object] | None
) -> Headers | None:
    """The shards of ``root`` (those its index names when ``indexed``, else every
    ``*.safetensors``) and their headers, read by a forked child and by this process once
    ``meanwhile`` has run here; None when no child ran (too few shards, no second core) or
    anything did not check out. ``meanwhile`` is called once, whatever the answer.

    The child reads the index, then the shards from the front of the folder's sorted listing;
    this process, from the back; they meet where their claims cross (``_Meeting``). The child
    checks its headers against the index name by name and sends, for every other shard the
    index names, the count and a digest of the names it maps there; this process holds its
    own headers against those.
    """
    names = sorted(p.name for p in root.glob("*.safetensors"))
    if len(names) < MIN_FILES or not can_fork():
        if meanwhile is not None:
            meanwhile()
        return None
    meeting = _Meeting(len(names))
    child = Forked(_child, root, names, meeting, indexed)
    try:
        if meanwhile is not None:
            meanwhile()
        mine = _read_from_back(root, names, meeting) if child.started else {}
    except BaseException:
        child.abandon()
        raise
    if mine is None:  # a header here did not read: the careful read says why
        child.abandon()
        return None
    answer = child.result()
    if answer is None:
        return None
    files, index, records, expected, remaining = answer
    headers: list[FileHeader] = []
    for rel in files:
        rec = records.get(rel)
        if rec is not None:
            headers.append(_header(root / rel, rec))
            continue
        header = mine.get(rel) or _read_one(root / rel)
        if isinstance(header, InputError):
            return None
        if expected is not None:
            if _names_digest(header.columns.names) != expected[rel]:
                return None
            remaining -= header.columns.count
        headers.append(header)
    return Headers(files, index, headers) if remaining == 0 else None


def read_serial(paths: list[Path]) -> list[Result]:
    """``read_header`` of each path in order, up to and including the first ``InputError``
    (which takes the place of its header): the careful read."""
    out: list[Result] = []
    for path in paths:
        out.append(header := _read_one(path))
        if isinstance(header, InputError):
            break
    return out


class _Meeting:
    """Where two readers of one list of ``n`` files are: the child takes them from the front,
    this process from the back, each telling the other how far it got (two int32 on a page
    both share). A file may be taken twice where they meet, never by neither."""

    def __init__(self, n: int) -> None:
        self.page = mmap.mmap(-1, 8)  # anonymous and shared: a forked child sees the same page
        struct.pack_into("<ii", self.page, 0, 0, n)

    def front_takes(self, i: int) -> bool:
        """The child takes file ``i`` (files go 0, 1, ...), unless this process has."""
        if i >= struct.unpack_from("<i", self.page, 4)[0]:
            return False
        struct.pack_into("<i", self.page, 0, i + 1)
        return True

    def back_takes(self, j: int) -> bool:
        """This process takes file ``j`` (files go n-1, n-2, ...), unless the child has."""
        if j < struct.unpack_from("<i", self.page, 0)[0]:
            return False
        struct.pack_into("<i", self.page, 4, j)
        return True


def _read_from_back(
    root: Path, names: list[str], meeting: _Meeting
) -> dict[str, FileHeader] | None:
    """Headers of the files this process takes, from the last; None at the first that does
    not read."""
    mine: dict[str, FileHeader] = {}
    for j in range(len(names) - 1, -1, -1):
        if not meeting.back_takes(j):
            break
        header = _read_one(root / names[j])
        if isinstance(header, InputError):
            return None
        mine[names[j]] = header
    return mine


def _child(root: Path, names: list[str], meeting: _Meeting, indexed: bool) -> tuple | None:
    """The child's answer for ``read_headers``: ``(files, index, records, expected,
    remaining)``: the shards and the index's top-level object (without ``weight_map``; None
    without an index), the header records of the shards read here (each holding exactly the
    names the index maps to it), ``(count, digest)`` of the names the index maps to each
    other shard (None without an index), and how many index names those shards must hold.
    None when anything is off (an error raised here ends the child, which is None too)."""
    index = weight_map = None
    files = names
    if indexed:
        index = read_json_if_present(root / INDEX_NAME) or {}
        files = files_from_index(root, index)
        weight_map = index.pop("weight_map")
    wanted = set(files)
    if not wanted.issubset(names):  # a shard in a subfolder: the careful read takes it
        return None
    records, count = {}, 0
    for i, rel in enumerate(names):
        if not meeting.front_takes(i):
            break
        if rel not in wanted:
            continue
        header = read_header(root / rel)
        if weight_map is not None and not all(
            map(eq, map(weight_map.get, header.columns.names), repeat(rel))
        ):
            return None
        count += header.columns.count
        records[rel] = _record(header)
    if weight_map is None:
        return files, None, records, None, 0
    groups: dict[str, list[str]] = {rel: [] for rel in wanted.difference(records)}
    for name, rel in weight_map.items():
        group = groups.get(rel)
        if group is not None:
            group.append(name)
    expected = {rel: _names_digest(group) for rel, group in groups.items()}
    return files, index, records, expected, len(weight_map) - count


def _names_digest(names: list[str]) -> tuple[int, bytes]:
    """``(count, sha256 of the sorted names joined by line breaks)``: equal for two lists of
    the same names in any order (with the count, a name holding a line break cannot pose as
    two)."""
    text = "\n".join(sorted(names)).encode("utf-8", "surrogatepass")
    return len(names), hashlib.sha256(text).digest()


def _read_one(path: Path) -> Result:
    try:
        return read_header(path)
    except InputError as exc:
        return exc


def _record(h: FileHeader) -> tuple:
    """``h`` as plain data for ``marshal`` (``_header`` makes it again)."""
    return (h.header_len, h.file_size, _plain(h.columns), h.metadata)


def _header(path: Path, rec: tuple) -> FileHeader:
    header_len, file_size, columns, metadata = rec
    return FileHeader(path, header_len, file_size, _columns(columns), metadata)


def _plain(c: HeaderColumns) -> tuple:
    """``c`` as ``marshal`` sends it: the int64 columns as their raw bytes."""
    return (c.text, c.count, c.dtypes, c.ranks, *(a.tobytes() for a in (c.dims, c.begins, c.ends)))


def _columns(plain: tuple) -> HeaderColumns:
    text, count, dtypes, ranks, *raw = plain
    dims, begins, ends = (array("q", r) for r in raw)  # from bytes: one copy, no parsing
    return HeaderColumns(text, count, dtypes, ranks, dims, begins, ends)
