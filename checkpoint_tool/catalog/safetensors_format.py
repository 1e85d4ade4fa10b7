"""The safetensors container: dtype table, strict header parsing, deterministic header writing.

A safetensors file is ``u64 little-endian header length | JSON header | data``. The header maps
tensor names to ``{"dtype": "F8_E4M3", "shape": [256, 128], "data_offsets": [begin, end]}``
(offsets relative to the start of the data region) plus an optional ``__metadata__`` dict of
strings. We never read tensor data here, and never unpickle anything.

Example::

    header = read_header(Path("model-00001-of-00002.safetensors"))
    header.tensors["model.layers.3.mlp.experts.0.gate_proj.weight"]
    # TensorEntry(name='model.layers.3.mlp.experts.0.gate_proj.weight',
    #             file='model-00001-of-00002.safetensors', dtype='U8', shape=(192, 128),
    #             begin=4096, end=28672)   (absolute offsets)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, islice
from operator import eq, itemgetter, lt
from pathlib import Path
from typing import Any, NamedTuple

from checkpoint_tool.catalog.json_input import load_json, short_repr
from checkpoint_tool.errors import InputError

#: safetensors dtype name -> size of one element in bits. ``F4`` headers record the logical
#: shape (two elements per byte); ``F6_*`` four elements per three bytes.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "C64": 64,
}

#: the dtypes by small-int code (a header's and a catalog's ``dtypes`` columns hold codes)
DTYPE_NAMES: tuple[str, ...] = tuple(DTYPE_BITS)
DTYPE_CODES: dict[str, int] = {name: code for code, name in enumerate(DTYPE_NAMES)}

MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
#: the largest dim a header may record (shapes are kept as signed 64-bit integers)
MAX_DIM = 2**62
#: joins a header's names in ``HeaderColumns.text`` (a name holding it is refused)
NAME_SEP = "\n"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def tensor_nbytes(dtype: str, shape: Sequence[int]) -> int:
    """Bytes a tensor of ``dtype`` and ``shape`` occupies (sub-byte dtypes packed)."""
    bits = DTYPE_BITS[dtype] * math.prod(shape)
    return (bits + 7) // 8


def storage_layout(
    dtype: str, shape: tuple[int, ...] | list[int], *, name: str = ""
) -> tuple[tuple[int, ...], int]:
    """Storage shape and bytes per storage element of a header ``dtype``/``shape``: the one
    owner of sub-byte packing. Sub-byte dtypes count their last dim in bytes.

    ``F4 [8, 64]`` -> ``((8, 32), 1)``; ``F6_E2M3 [8, 64]`` -> ``((8, 48), 1)``;
    ``BF16 [8, 64]`` -> ``((8, 64), 2)``. A last dim that does not fill whole bytes
    (``F4 [8, 7]``) has no row-wise storage shape (safetensors packs the flat tensor):
    ``InputError`` naming the tensor.
    """
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise InputError(f"tensor '{name}': dtype {dtype} is not a safetensors dtype ckpt knows")
    shape = tuple(shape)
    if bits % 8 == 0:
        return shape, bits // 8
    if not shape:
        return (1,), 1
    *lead, last = shape
    if (last * bits) % 8:
        raise InputError(
            f"tensor '{name}': {dtype} shape {list(shape)} does not pack its last dim into whole "
            f"bytes ({last} x {bits} bits); ckpt cannot slice such a tensor by rows"
        )
    return (*lead, last * bits // 8), 1


#: bytes per gpt-oss MXFP4 block (32 E2M1 values): the last dim of ``X.experts.*_blocks``
GPT_OSS_BLOCK_BYTES = 16
_GPT_OSS_BLOCKS = (".experts.gate_up_proj_blocks", ".experts.down_proj_blocks")


def gpt_oss_storage_shape(name: str, shape: list[int]) -> list[int]:
    """How ckpt keeps gpt-oss's MXFP4 expert weights ``X.experts.*_blocks`` U8
    ``[E, R, G, 16]``: as ``[E, R, G * 16]``, the same bytes in the same order, the packed
    ``[..., out, in/2]`` storage every MXFP4 reader here knows. Writers restore the
    producer's 4-D shape (``gpt_oss_header_shape``); any other tensor is left as is.

    ``("m.layers.0.mlp.experts.down_proj_blocks", [32, 2880, 90, 16])`` -> ``[32, 2880, 1440]``.
    """
    if len(shape) == 4 and shape[-1] == GPT_OSS_BLOCK_BYTES and name.endswith(_GPT_OSS_BLOCKS):
        return [*shape[:2], shape[2] * GPT_OSS_BLOCK_BYTES]
    return shape


def gpt_oss_header_shape(name: str, dtype: str, shape: Sequence[int]) -> list[int]:
    """The header shape gpt-oss writes for ``name``: its expert blocks ``[E, R, G * 16]`` (how
    the catalog keeps them, ``gpt_oss_storage_shape``) as ``[E, R, G, 16]``; any other tensor
    as is.

    ``("m.layers.0.mlp.experts.down_proj_blocks", "U8", [32, 2880, 1440])`` ->
    ``[32, 2880, 90, 16]``.
    """
    out = list(shape)
    if name.endswith(_GPT_OSS_BLOCKS) and dtype == "U8" and len(out) == 3:
        if out[-1] % GPT_OSS_BLOCK_BYTES == 0:
            return [*out[:-1], out[-1] // GPT_OSS_BLOCK_BYTES, GPT_OSS_BLOCK_BYTES]
    return out


def storage_shape(
    dtype: str, shape: tuple[int, ...] | list[int], *, name: str = ""
) -> tuple[int, ...]:
    """Storage shape of a header ``dtype``/``shape`` (see ``storage_layout``):
    ``F4 [8, 64]`` -> ``(8, 32)``."""
    return storage_layout(dtype, shape, name=name)[0]


def header_shape(dtype: str, storage: tuple[int, ...] | list[int]) -> list[int]:
    """Inverse of ``storage_shape``: the shape a safetensors header records,
    ``("F4", (8, 32))`` -> ``[8, 64]``."""
    out = list(storage)
    bits = DTYPE_BITS[dtype]
    if bits % 8 and out:
        out[-1] = out[-1] * 8 // bits
    return out


def element_bytes(dtype: str) -> int:
    """Bytes per storage element: ``BF16`` 2; sub-byte dtypes 1 (a byte of packed values)."""
    bits = DTYPE_BITS[dtype]
    return bits // 8 if bits % 8 == 0 else 1


class TensorEntry(NamedTuple):
    """One tensor as its header records it: where it lives (``file``, absolute byte offsets
    ``[begin, end)``), its dtype and shape. A catalog's ``file`` is relative to its root; a
    ``FileHeader``'s is the file's name.

    ``TensorEntry(name='model.norm.weight', file='model-00001-of-00002.safetensors',
    dtype='BF16', shape=(7168,), begin=80, end=14416)``. A named tuple (immutable, compared by
    value): a catalog holds ~92k of them for a DeepSeek-R1, and one is built in a third of the
    time of a frozen dataclass.
    """

    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


#: the same record under the name validate's header scan uses
TensorHeader = TensorEntry


#: one validated header entry: ``(name, dtype, shape, begin, end)``, offsets absolute
HeaderEntry = tuple[str, str, tuple[int, ...], int, int]


class HeaderColumns(NamedTuple):
    """A header's entries as columns, in header order (no per-tensor objects at all).

    ``text='a.weight\\na.bias'`` (the names joined by a line break, which no name holds),
    ``count=2``, ``dtypes=bytes([DTYPE_CODES['BF16']] * 2)``, ``ranks=bytes([2, 1])``,
    ``dims=array('q', [8, 64, 8])``, ``begins=array('q', [80, 1104])``,
    ``ends=array('q', [1104, 1120])`` (absolute offsets). Plain ``str``, ``bytes`` and
    ``array``: the forked header reader sends them as they are, and they need no numpy.
    """

    text: str
    count: int
    dtypes: bytes
    ranks: bytes
    dims: array
    begins: array
    ends: array

    @property
    def names(self) -> list[str]:
        """The names, in header order (made now from ``text``)."""
        return self.text.split(NAME_SEP) if self.count else []

    def entries(self) -> tuple[HeaderEntry, ...]:
        """The same entries as ``(name, dtype, shape, begin, end)`` tuples."""
        out: list[HeaderEntry] = []
        dims, pos = self.dims, 0
        for name, code, rank, begin, end in zip(
            self.names, self.dtypes, self.ranks, self.begins, self.ends, strict=True
        ):
            out.append((name, DTYPE_NAMES[code], tuple(dims[pos : pos + rank]), begin, end))
            pos += rank
        return tuple(out)


#: the columns of a header without entries (what a catalog's kept headers carry)
NO_COLUMNS = HeaderColumns("", 0, b"", b"", array("q"), array("q"), array("q"))


@dataclass(frozen=True)
class FileHeader:
    """A parsed, validated safetensors header.

    ``columns`` hold the entries (the catalog moves them into its table and keeps the header
    with ``NO_COLUMNS`` and their ``digest``); ``entries`` (tuples) and ``tensors`` (name ->
    ``TensorEntry``) are built from them on first use.
    """

    path: Path
    header_len: int
    file_size: int
    columns: HeaderColumns
    metadata: dict[str, str] = field(default_factory=dict)
    #: ``columns_digest(columns)`` once the columns are gone (``b""`` while they are here)
    digest: bytes = b""

    def columns_digest(self) -> bytes:
        """What the entries were: the kept ``digest``, else ``columns_digest`` of them."""
        return self.digest or columns_digest(self.columns)

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def file(self) -> str:
        """The file's name (``path`` may be a remote label)."""
        return _file_name(self.path)

    @cached_property
    def entries(self) -> tuple[HeaderEntry, ...]:
        return self.columns.entries()

    @cached_property
    def tensors(self) -> dict[str, TensorEntry]:
        file = self.file
        return {name: TensorEntry(name, file, *rest) for name, *rest in self.entries}


def columns_digest(cols: HeaderColumns) -> bytes:
    """A sha256 of every entry of ``cols`` (names, dtypes, shapes, offsets): two headers with
    the same digest record the same tensors at the same places."""
    h = hashlib.sha256()
    h.update(cols.text.encode("utf-8", "surrogatepass") + b"\0")
    for part in (cols.dtypes, cols.ranks, cols.dims, cols.begins, cols.ends):
        raw = bytes(part)
        h.update(len(raw).to_bytes(8, "little") + raw)
    return h.digest()


def _file_name(path: Path | str) -> str:
    return Path(str(path)).name


def read_header(path: Path) -> FileHeader:
    """Read and validate the header of one safetensors file; raise ``InputError`` on any fault.

    Checks: file long enough, header length within the file, JSON object, known dtypes,
    integer shapes, offsets that match the shape, lie inside the data region and do not overlap.
    """
    path = Path(path)
    if path.suffix in PICKLE_SUFFIXES:
        raise InputError(
            f"{path}: pickle-based checkpoint files are refused (never unpickled); "
            "convert them to safetensors first"
        )
    try:
        with open(path, "rb") as fh:
            file_size = os.fstat(fh.fileno()).st_size
            if file_size < 8:
                raise InputError(
                    f"{path}: file is {file_size} bytes, too short for a safetensors header; "
                    "the shard is truncated, re-download it"
                )
            (header_len,) = struct.unpack("<Q", fh.read(8))
            if header_len > MAX_HEADER_BYTES or 8 + header_len > file_size:
                raise InputError(
                    f"{path}: header length {header_len} exceeds the file size {file_size}; "
                    "the shard is truncated or not safetensors, re-download it"
                )
            raw = fh.read(header_len)
    except OSError as exc:
        raise InputError(
            f"{path}: cannot read ({exc.strerror}); check the path and permissions"
        ) from exc
    return parse_header(path, header_len, raw, file_size)


def parse_header(path: Path | str, header_len: int, raw: bytes, file_size: int) -> FileHeader:
    """Validate header bytes read elsewhere (a remote range read): the checks of
    ``read_header`` after the length prefix. ``raw`` is the JSON, ``header_len`` bytes."""
    if header_len > MAX_HEADER_BYTES or 8 + header_len > file_size:
        raise InputError(
            f"{path}: header length {header_len} exceeds the file size {file_size}; "
            "the shard is truncated or not safetensors, re-download it"
        )
    doc = load_json(raw, f"{path}: header", check_depth=False)
    if not isinstance(doc, dict):
        raise InputError(f"{path}: header is not a JSON object; the shard is corrupt")
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(type(v) is str for v in metadata.values()):
        raise InputError(
            f"{path}: __metadata__ is not an object of strings (safetensors refuses anything "
            "else); the shard is corrupt, re-download or re-export it"
        )
    _check_no_duplicates(path, raw, len(doc))
    data_start = 8 + header_len
    columns = _parse_entries(path, doc, data_start, file_size - data_start)
    return FileHeader(
        path,  # type: ignore[arg-type]  # a str label for a remote file
        header_len,
        file_size,
        columns,
        dict(metadata),
    )


#: the keys every entry has once: a header whose raw bytes hold each exactly once per entry
#: has no key written twice (a key spelled with escapes, or inside a name, is counted apart
#: and sends the header to the careful check)
_ENTRY_KEYS = (b'"dtype"', b'"shape"', b'"data_offsets"')


def _check_no_duplicates(path: Path | str, raw: bytes, entries: int) -> None:
    """Refuse a header with a JSON key written twice: two entries of one tensor name (Python's
    ``json`` keeps the last silently) or a field twice in one entry. safetensors refuses them.

    Cheap: three ``bytes.count`` passes (~1 ms per MB of header); only a header whose counts
    differ from its entry count (a duplicate, or a name holding one of those keys) is parsed a
    second time, keeping every key, to find the duplicate.
    """
    if all(raw.count(key) == entries for key in _ENTRY_KEYS):
        return
    twice: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                twice.append(k)
            out[k] = v
        return out

    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=pairs)
    except (RecursionError, ValueError):  # already parsed once: cannot happen
        return
    if twice:
        raise InputError(
            f"{path}: key {short_repr(twice[0])} is written twice in one JSON object of the "
            "header (a tensor listed twice, or a field twice in an entry); safetensors refuses "
            "such a file: re-export the shard"
        )


def _parse_entries(
    path: Path, doc: dict[str, object], data_start: int, data_len: int
) -> HeaderColumns:
    """Every entry of a header, checked as ``_parse_entry`` checks it, and no overlaps.

    A header holds hundreds of entries (~92k over a DeepSeek-R1 checkpoint): a well-formed one
    passes a few plain type checks (``_well_formed``); anything else goes through
    ``_parse_entry``, which accepts it the same way or raises the precise error.
    """
    entries: list[tuple[str, str, list[int], int, int]] = []
    append = entries.append
    for name, info in doc.items():
        fields = _well_formed(info, data_len)
        if fields is None:
            t = _parse_entry(path, name, info, data_start, data_len)
            append((name, t.dtype, gpt_oss_storage_shape(name, list(t.shape)), t.begin, t.end))
        else:
            dtype, shape, begin, end = fields
            if len(shape) == 4 and dtype == "U8":
                shape = gpt_oss_storage_shape(name, shape)
            append((name, dtype, shape, data_start + begin, data_start + end))
    if not entries:
        return NO_COLUMNS
    # transposed at C speed; the per-entry tuples live only until this header is done
    names, dtypes, shapes, begins, ends = zip(*entries, strict=True)
    try:
        ranks = bytes(map(len, shapes))
    except ValueError:  # a rank over 255
        name = next(n for n, sh in zip(names, shapes, strict=True) if len(sh) > 255)
        raise InputError(
            f"{path}: tensor {short_repr(name)}: shape has too many dims for ckpt"
        ) from None
    text = NAME_SEP.join(names)
    if text.count(NAME_SEP) != len(names) - 1:
        bad = next(n for n in names if NAME_SEP in n)
        raise InputError(
            f"{path}: tensor {short_repr(bad)} has a line break in its name, which ckpt cannot catalog; "
            "rename the tensor"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, written as a \uD800-\uDFFF escape
            bad = next(n for n in names if not _utf8(n))
            raise InputError(
                f"{path}: tensor {short_repr(bad)} has a name that is not valid UTF-8 (a lone surrogate "
                "escape in the header JSON), which safetensors does not allow; rewrite the "
                "header with the intended name"
            ) from None
    columns = HeaderColumns(
        text,
        len(names),
        bytes(map(DTYPE_CODES.__getitem__, dtypes)),
        ranks,
        array("q", chain.from_iterable(shapes)),
        array("q", begins),
        array("q", ends),
    )
    spans = sorted(zip(begins, ends, strict=True))
    if any(map(eq, begins, ends)):  # empty tensors overlap nothing
        spans = [sp for sp in spans if sp[1] > sp[0]]
    if any(map(lt, islice(map(itemgetter(0), spans), 1, None), map(itemgetter(1), spans))):
        # raises, naming the two tensors
        file = _file_name(path)
        _check_no_overlap(
            path, {name: TensorEntry(name, file, *rest) for name, *rest in columns.entries()}
        )
    return columns


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _well_formed(info: Any, data_len: int) -> tuple[str, list[int], int, int] | None:
    """``(dtype, shape, begin, end)`` of an entry that is plainly valid, else None.

    Accepts a subset of what ``_parse_entry`` accepts (exact ``int``s, no ``bool``), with the
    same result; None means "let ``_parse_entry`` decide".
    """
    try:  # a non-object entry, a missing key, odd offsets, an unknown or unhashable dtype
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        bits = DTYPE_BITS[dtype]
    except (TypeError, KeyError, ValueError):
        return None
    if type(shape) is not list or type(begin) is not int or type(end) is not int:
        return None
    if not 0 <= begin <= end <= data_len:
        return None
    count = 1
    for d in shape:
        if type(d) is not int or not 0 <= d <= MAX_DIM:
            return None
        count *= d
    if end - begin != (bits * count + 7) // 8:
        return None
    return dtype, shape, begin, end


def _parse_entry(
    path: Path, name: str, info: object, data_start: int, data_len: int
) -> TensorEntry:
    if not isinstance(info, dict):
        raise InputError(
            f"{path}: tensor {short_repr(name)}: header entry is not an object; shard is corrupt"
        )
    dtype = info.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise InputError(
            f"{path}: tensor {short_repr(name)}: unknown dtype {short_repr(dtype)}; "
            f"supported: {', '.join(sorted(DTYPE_BITS))}"
        )
    shape = info.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= MAX_DIM for d in shape):
        raise InputError(
            f"{path}: tensor {short_repr(name)}: shape {short_repr(shape)} is not a list of sizes"
        )
    offsets = info.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise InputError(
            f"{path}: tensor {short_repr(name)}: data_offsets {short_repr(offsets)} are malformed"
        )
    begin, end = offsets
    if end > data_len:
        raise InputError(
            f"{path}: tensor {short_repr(name)}: data_offsets [{begin}, {end}) run past the end of the "
            f"file (data region is {data_len} bytes); the shard is truncated, re-download it"
        )
    expected = tensor_nbytes(dtype, shape)
    if end - begin != expected:
        raise InputError(
            f"{path}: tensor {short_repr(name)}: {end - begin} bytes on disk but {dtype}{short_repr(shape)} needs "
            f"{expected}; the header is corrupt"
        )
    file = _file_name(path)
    return TensorEntry(name, file, dtype, tuple(shape), data_start + begin, data_start + end)


def _check_no_overlap(path: Path, tensors: dict[str, TensorEntry]) -> None:
    ordered = sorted(tensors.items(), key=lambda kv: (kv[1].begin, kv[1].end))
    prev_name, prev_end = None, -1
    for name, t in ordered:
        if t.nbytes and prev_name is not None and t.begin < prev_end:
            raise InputError(
                f"{path}: tensor {short_repr(name)}: bytes [{t.begin}, {t.end}) overlap tensor "
                f"{short_repr(prev_name)}; the header is corrupt"
            )
        if t.nbytes:
            prev_name, prev_end = name, t.end


def build_header(
    tensors: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None = None
) -> tuple[bytes, list[tuple[int, int]]]:
    """Serialize a header for ``[(name, dtype, shape), ...]`` laid out in the given order.

    Returns the full prefix (8-byte length + JSON, space-padded to a multiple of 8 like the
    reference implementation) and each tensor's relative ``(begin, end)``. Deterministic: the
    same list gives the same bytes.
    """
    doc: dict[str, object] = {}
    if metadata:
        doc["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    offsets: list[tuple[int, int]] = []
    pos = 0
    for name, dtype, shape in tensors:
        n = tensor_nbytes(dtype, shape)
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + n]}
        offsets.append((pos, pos + n))
        pos += n
    raw = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offsets
