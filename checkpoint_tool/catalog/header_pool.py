"""Read many safetensors headers on two cores: this process and one forked child.

Parsing a header is pure Python work (JSON, then the checks of ``read_header``): ~0.3 s for
the 163 shards / 92k tensors of DeepSeek-R1, and ~0.1 s more for the index. Two ways:

``read_verified(root, meanwhile)``: when this process has other work (``meanwhile``, e.g.
importing what comes next), a forked child reads the index and then the shards from the
front, while this process, once ``meanwhile`` is done, reads them from the back; the child
checks every header it read against the index, name by name, and tells this process what the
index maps to each other shard. The answer is the files, the index (without its
``weight_map``) and the headers, or None when anything is off (the caller then reads it all
itself, the careful way, and reports the precise error).

``HeaderReader(candidates)`` starts a forked child (``checkpoint_tool.forked``) on the last
``1 - PARENT_SHARE`` of the candidate files at once, so that this process can meanwhile read
the index and parse its own share. ``read(paths)`` then returns exactly what ``read_header`` gives file by
file, in ``paths`` order: the first failing file's ``InputError`` takes the place of its
header and nothing after it is returned. Candidates that ``paths`` does not name (a stale
shard next to the index) are never reported; files nobody parsed yet, or that the child
did not answer for, are parsed here.

Example::

    reader = HeaderReader(sorted(root.glob("*.safetensors")))   # the child starts
    files = files_from_index(...)                               # meanwhile, here
    reader.read([root / f for f in files])
    # [FileHeader(...), ...]  or  [FileHeader(...), InputError(...)]
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

#: fewer files than this are read here: a fork and a pipe cost ~10 ms
MIN_FILES = 16
#: the share of the candidates this process parses: it also reads the index, unpacks the
#: child's answer and builds the catalog from all of them
PARENT_SHARE = 0.3

Result = FileHeader | InputError


class Verified(NamedTuple):
    """A folder's shards as its index names them, every header read and held against the
    index: ``files`` (sorted), ``index_doc`` (its top-level object without ``weight_map``),
    ``headers`` (one per file, in order)."""

    files: list[str]
    index_doc: dict
    headers: list[FileHeader]


def read_verified(root: Path, meanwhile: Callable[[], object]) -> Verified | None:
    """The index of ``root`` and every header it names, read by a forked child and, once
    ``meanwhile`` has run here (called once), by this process too; None when the child could
    not run or anything did not check out.

    The child reads the index, then the shards from the front of the folder's sorted listing;
    this process, from the back; they meet where their claims cross (``_Meeting``). The child
    checks its headers against the index name by name and sends, for every other shard the
    index names, the count and a digest of the names it maps there; this process holds its
    own headers against those.
    """
    names = sorted(p.name for p in root.glob("*.safetensors"))
    meeting = _Meeting(len(names))
    child = Forked(_verified, root, names, meeting)
    try:
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
            headers.append(_header(root / rel, rec))  # type: ignore[arg-type]
            continue
        header = mine.get(rel) or _read_one(root / rel)
        if isinstance(header, InputError) or _names_digest(header.columns.names) != expected[rel]:
            return None
        remaining -= header.columns.count
        headers.append(header)
    return Verified(files, index, headers) if remaining == 0 else None


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


def _verified(root: Path, names: list[str], meeting: _Meeting) -> tuple | None:
    """The child's answer for ``read_verified``: ``(files, index, records, expected,
    remaining)``: the index's shards and top-level object (without ``weight_map``), the
    header records of the shards read here (each holding exactly the names the index maps
    to it), ``(count, digest)`` of the names the index maps to each other shard, and how
    many index names those shards must hold. None when anything is off (an error raised
    here ends the child, which is None too)."""
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
        if not all(map(eq, map(weight_map.get, header.columns.names), repeat(rel))):
            return None
        count += header.columns.count
        records[rel] = _record(header)
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


class HeaderReader:
    """Headers of files among ``candidates``, parsed partly by a forked child."""

    def __init__(self, candidates: list[Path]) -> None:
        self.child: Forked | None = None
        self.child_paths: list[Path] = []
        if len(candidates) >= MIN_FILES and can_fork():
            self.child_paths = candidates[int(len(candidates) * PARENT_SHARE) :]
            self.child = Forked(_records, self.child_paths)

    def read(
        self, paths: list[Path], meanwhile: Callable[[], object] | None = None
    ) -> list[Result]:
        """``read_header`` of each path, in order, stopping after the first ``InputError``;
        ``meanwhile`` is called once while the child works."""
        try:
            theirs = set(self.child_paths) if self.child is not None else set()
            if meanwhile is not None:
                meanwhile()
            done = _read_serial([p for p in paths if p not in theirs])
            if self.child is not None:
                done.update(self._answers())
        finally:
            self.close()
        out: list[Result] = []
        for path in paths:
            header = done.get(path)
            if header is None:  # after an error of its reader, or no answer from the child
                header = _read_one(path)
            out.append(header)
            if isinstance(header, InputError):
                break
        return out

    def _answers(self) -> dict[Path, Result]:
        child, self.child = self.child, None
        records = child.result() if child is not None else None
        if records is None:
            return {}
        return {
            path: _header(path, rec) for path, rec in zip(self.child_paths, records, strict=False)
        }

    def close(self) -> None:
        """Stop the child if its answer is no longer wanted (an error before ``read``)."""
        if self.child is not None:
            self.child.abandon()
            self.child = None


def _read_one(path: Path) -> Result:
    try:
        return read_header(path)
    except InputError as exc:
        return exc


def _read_serial(paths: list[Path]) -> dict[Path, Result]:
    """Headers of ``paths`` in order, up to and including the first error."""
    out: dict[Path, Result] = {}
    for path in paths:
        out[path] = header = _read_one(path)
        if isinstance(header, InputError):
            break
    return out


def _records(paths: list[Path]) -> list[tuple]:
    """The child's answer: one plain tuple per file (its columns as bytes), in
    order, the first error last."""
    records: list[tuple] = []
    for h in _read_serial(paths).values():
        if isinstance(h, InputError):
            records.append(("error", h.message, h.exit_code))
        else:
            records.append(_record(h))
    return records


def _record(h: FileHeader) -> tuple:
    """``h`` as plain data for ``marshal`` (``_header`` makes it again)."""
    return (h.header_len, h.file_size, _plain(h.columns), h.metadata)


def _header(path: Path, rec: tuple) -> Result:
    if rec[0] == "error":
        return InputError(rec[1], exit_code=rec[2])
    header_len, file_size, columns, metadata = rec
    return FileHeader(path, header_len, file_size, _columns(columns), metadata)


def _plain(c: HeaderColumns) -> tuple:
    """``c`` as ``marshal`` sends it: the int64 columns as their raw bytes."""
    return (c.text, c.count, c.dtypes, c.ranks, *(a.tobytes() for a in (c.dims, c.begins, c.ends)))


def _columns(plain: tuple) -> HeaderColumns:
    text, count, dtypes, ranks, *raw = plain
    dims, begins, ends = (array("q", r) for r in raw)  # from bytes: one copy, no parsing
    return HeaderColumns(text, count, dtypes, ranks, dims, begins, ends)
