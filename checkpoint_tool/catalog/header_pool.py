"""Read many safetensors headers on two cores: this process and one forked child.

Parsing a header is pure Python work (JSON, then the checks of ``read_header``): ~0.5 s for
the 163 shards / 92k tensors of DeepSeek-R1. With at least ``MIN_FILES`` files and a second
core (``checkpoint_tool.forked``), a child parses the last 60 % while this process parses
the rest. Results and errors are exactly those of ``read_header`` in file order: the first
failing file's ``InputError`` takes the place of its header and nothing after it is
returned. Without a child answer, this process reads those files itself.

Example::

    read_headers([Path("m/model-00001-of-00002.safetensors"), ...])
    # [FileHeader(...), FileHeader(...)]  or  [FileHeader(...), InputError(...)]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from checkpoint_tool.catalog.safetensors_format import FileHeader, read_header
from checkpoint_tool.errors import InputError
from checkpoint_tool.forked import Forked, can_fork

#: fewer files than this are read here: a fork and a pipe cost ~10 ms
MIN_FILES = 16
#: the share of the files this process parses: less than half, as it also unpacks the
#: child's answer and builds the catalog from all of them
PARENT_SHARE = 0.4


def read_headers(
    paths: list[Path], *, meanwhile: Callable[[], object] | None = None
) -> list[FileHeader | InputError]:
    """``read_header`` of each path, in order, stopping after the first ``InputError``.

    ``meanwhile`` is called once, while the child (if any) parses its share: work this
    process would do next anyway (``inspect`` imports the policy code, ~0.2 s).
    """
    if len(paths) < MIN_FILES or not can_fork():
        if meanwhile is not None:
            meanwhile()
        return _read_serial(paths)
    half = int(len(paths) * PARENT_SHARE)
    child = Forked(_records, paths[half:])
    try:
        if meanwhile is not None:
            meanwhile()
        mine = _read_serial(paths[:half])
    except BaseException:
        child.abandon()
        raise
    if isinstance(mine[-1], InputError):  # an earlier file failed: the child's files don't count
        child.abandon()
        return mine
    records = child.result()
    if records is None:
        return mine + _read_serial(paths[half:])
    return mine + [_header(path, rec) for path, rec in zip(paths[half:], records, strict=False)]


def _read_serial(paths: list[Path]) -> list[FileHeader | InputError]:
    out: list[FileHeader | InputError] = []
    for path in paths:
        try:
            out.append(read_header(path))
        except InputError as exc:
            out.append(exc)
            break
    return out


def _records(paths: list[Path]) -> list[tuple]:
    """The child's answer: one plain tuple per file, the first error last."""
    records: list[tuple] = []
    for h in _read_serial(paths):
        if isinstance(h, InputError):
            records.append(("error", h.message, h.exit_code))
        else:
            records.append((h.header_len, h.file_size, h.entries, h.metadata))
    return records


def _header(path: Path, rec: tuple) -> FileHeader | InputError:
    if rec[0] == "error":
        return InputError(rec[1], exit_code=rec[2])
    header_len, file_size, entries, metadata = rec
    return FileHeader(path, header_len, file_size, entries, metadata)
