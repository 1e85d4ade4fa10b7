"""A plan's JSON, both ways: free functions over the plan records of ``plan.model``.

The document schema (``document_models()``: ``PlanDocument``, ``OutputFileDocument``, ...) is
generated from those records: same field names, order and defaults, each record type replaced
by its document model (named tuples become objects, sequences lists). It validates what is read
back (``plan_load``). Writing does not build it: a full-size plan has ~92k tensors, so the writers
are string templates, each equal to what pydantic + ``json`` write for the document (a test
holds them to it):

- ``plan_json_text`` / ``plan_json_chunks``: ``ckpt plan --format json`` (``json.dumps(doc,
  indent=2, sort_keys=True)``, ASCII-escaped), written tensor by tensor;
- ``plan_compact_json`` / ``file_json`` / ``plan_head_json``: pydantic's compact
  ``model_dump_json`` (declaration order); ``plan_sha256`` hashes them file by file;
- ``plan_dump``: the document as plain data.

Example::

    plan_json_text(plan)[:40]   # '{\\n  "ckpt_version": "0.1.0",\\n  "config": {'
    plan_load(json.loads(text)) == plan          # True
    plan_sha256(plan)                            # '3b1f...'
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any, Union

from pydantic import BaseModel, Field, create_model

from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan
from checkpoint_tool.plan.output_table import OutputRows, Provenance
from checkpoint_tool.regions import Pad, Piece, Region

__all__ = [
    "document_models",
    "file_dump",
    "file_json",
    "plan_compact_json",
    "plan_document",
    "plan_dump",
    "plan_head_json",
    "plan_json_chunks",
    "plan_json_text",
    "plan_load",
    "plan_sha256",
]

# -- the document schema, generated from the records --------------------------------------------

#: the records that become document models, innermost first
RECORDS: tuple[type, ...] = (Region, Pad, Piece, OutputTensor, OutputFile, Plan)


def _record_fields(record: type) -> list[tuple[str, Any]]:
    """``(name, default)`` of a dataclass or named tuple, in declaration order
    (``dataclasses.MISSING``: required; a ``default_factory`` is called once)."""
    if dataclasses.is_dataclass(record):
        out = []
        for f in dataclasses.fields(record):
            if f.default_factory is not dataclasses.MISSING:
                out.append((f.name, f.default_factory()))
            else:
                out.append((f.name, f.default))
        return out
    defaults = record._field_defaults  # type: ignore[attr-defined]
    return [(n, defaults.get(n, dataclasses.MISSING)) for n in record._fields]  # type: ignore[attr-defined]


def _document_type(hint: Any, models: Mapping[type, type[BaseModel]]) -> Any:
    """The document's type for a record field's type hint."""
    if hint in models:
        return models[hint]
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (list, tuple, Sequence):
        return list[_document_type(args[0], models)]  # type: ignore[misc]
    if origin in (Union, types.UnionType):
        return Union[tuple(_document_type(a, models) for a in args)]  # noqa: UP007
    return hint


def _document_model(record: type, models: Mapping[type, type[BaseModel]]) -> type[BaseModel]:
    hints = typing.get_type_hints(record)
    fields: dict[str, Any] = {}
    for name, default in _record_fields(record):
        kind = _document_type(hints[name], models)
        if default is dataclasses.MISSING:
            fields[name] = (kind, ...)
        elif isinstance(default, (list, tuple, dict)):
            empty = type(default) if not isinstance(default, tuple) else list
            fields[name] = (kind, Field(default_factory=empty))
        else:
            fields[name] = (kind, default)
    return create_model(f"{record.__name__}Document", **fields)


@functools.cache
def document_models() -> dict[type, type[BaseModel]]:
    """Record type -> its document model, e.g. ``document_models()[Plan]`` (``PlanDocument``).
    Built on first use: writing a plan's pretty JSON never needs them."""
    models: dict[type, type[BaseModel]] = {}
    for record in RECORDS:
        models[record] = _document_model(record, models)
    return models


def plan_document() -> type[BaseModel]:
    """The document model of a whole plan (``PlanDocument``)."""
    return document_models()[Plan]


#: top-level keys of the document, in declaration order (the compact spelling's order)
_FIELDS = tuple(name for name, _ in _record_fields(Plan))


# -- plain data ---------------------------------------------------------------------------------


def piece_dump(p: Piece) -> dict[str, Any]:
    return {
        "source": p.source,
        "slices": [{"dim": r.dim, "start": r.start, "stop": r.stop} for r in p.slices],
        "pads": [{"dim": d.dim, "amount": d.amount, "fill": d.fill} for d in p.pads],
    }


def tensor_dump(t: OutputTensor) -> dict[str, Any]:
    return {
        "name": t.name,
        "dtype": t.dtype,
        "shape": list(t.shape),
        "pieces": [piece_dump(p) for p in t.pieces],
        "combine": t.combine,
        "axis": t.axis,
        "ops": list(t.ops),
        "layer": t.layer,
        "fill": t.fill,
    }


def file_dump(f: OutputFile) -> dict[str, Any]:
    return {
        "name": f.name,
        "tensors": [tensor_dump(t) for t in f.tensors],
        "nbytes": f.nbytes,
        "rank": f.rank,
    }


def _head_dump(plan: Plan, *, provenance: bool = True) -> dict[str, Any]:
    """Every field but ``files`` (and ``provenance`` unless asked for), as plain JSON data."""
    head = {
        "ckpt_version": plan.ckpt_version,
        "source": plan.source,
        "source_revision": plan.source_revision,
        "recipe": plan.recipe,
        "options": plan.options.model_dump(mode="json"),
        "dropped": [d.model_dump(mode="json") for d in plan.dropped],
        "config": plan.config,
        "side_files": list(plan.side_files),
        "fse_layers": {str(k): v for k, v in plan.fse_layers.items()},
        "summary": plan.summary.model_dump(mode="json") if plan.summary is not None else None,
        "notes": list(plan.notes),
    }
    if provenance:
        head["provenance"] = {k: list(v) for k, v in plan.provenance.items()}
    return head


def plan_dump(plan: Plan) -> dict[str, Any]:
    """The document as plain data, keys in declaration order."""
    head = _head_dump(plan)
    head["files"] = [file_dump(f) for f in plan.files]
    return {k: head[k] for k in _FIELDS}


# -- compact (pydantic's model_dump_json) -------------------------------------------------------


def _c(s: str) -> str:
    return encode_basestring(s)


def _piece_compact(p: Piece) -> str:
    slices = ",".join(f'{{"dim":{r.dim},"start":{r.start},"stop":{r.stop}}}' for r in p.slices)
    pads = ",".join(f'{{"dim":{d.dim},"amount":{d.amount},"fill":{_c(d.fill)}}}' for d in p.pads)
    return f'{{"source":{_c(p.source)},"slices":[{slices}],"pads":[{pads}]}}'


def _opt(value: Any) -> str:
    if value is None:
        return "null"
    return _c(value) if isinstance(value, str) else str(value)


def tensor_json(t: OutputTensor) -> str:
    shape = ",".join(map(str, t.shape))
    pieces = ",".join(map(_piece_compact, t.pieces))
    ops = ",".join(map(_c, t.ops))
    return (
        f'{{"name":{_c(t.name)},"dtype":{_c(t.dtype)},"shape":[{shape}],"pieces":[{pieces}],'
        f'"combine":{_c(t.combine)},"axis":{t.axis},"ops":[{ops}],"layer":{_opt(t.layer)},'
        f'"fill":{_opt(t.fill)}}}'
    )


class _Templates:
    """An ``OutputRows`` file's tensors as text: one template per (form, layer), split
    around the name and each piece's source, so a tensor is the template with its two names
    put in. ``write(record)`` spells a template's record; the source names are made per
    file (``names_of`` its rows), never all at once."""

    def __init__(self, write: Any, name_key: str, source_key: str, encode: Any) -> None:
        self.write, self.encode = write, encode
        self.name_key, self.source_key = name_key, source_key
        self.parts: dict[tuple[int, int], tuple[str, ...]] = {}
        self.plain: bool | None = None

    def __call__(self, rows: OutputRows) -> Iterator[str]:
        table = rows.table
        if self.plain is None:
            # names JSON writes as they are, between quotes: both spellings agree there
            own = "\n".join(n for n in table.names if n is not None)
            self.plain = _plain(table.sources.joined_names()) and _plain(own)
        encode, parts_of, plain = self.encode, self.parts, self.plain
        own_names = table.names
        picked = rows.rows
        source, form, layer = (c[picked] for c in table.columns()[:3])
        sources = table.sources.names_of(source)  # this file's, not every name at once
        if not plain:
            sources = list(map(encode, sources))
        keys = zip(form.tolist(), layer.tolist(), strict=True)
        for r, src, key in zip(picked.tolist(), sources, keys, strict=True):
            parts = parts_of.get(key)
            if parts is None:
                parts = parts_of[key] = self._split(self.write(table.record(r, "", "")))
            name = own_names[r]
            name = src if name is None else name if plain else encode(name)
            if len(parts) == 3:
                yield f"{parts[0]}{name}{parts[1]}{src}{parts[2]}"
                continue
            out = [parts[0], name, parts[1]]
            for piece in parts[2:]:
                out += (src, piece)
            yield "".join(out)

    def _split(self, text: str) -> tuple[str, ...]:
        """A template's text around the name and each source: with ``plain`` names the
        quotes go into the pieces (the names are put in as they are)."""
        head, rest = text.split(self.name_key, 1)
        sources = rest.split(self.source_key)
        nk, sk = self.name_key[:-2], self.source_key[:-2]
        q = '"' if self.plain else ""
        out = [head + nk + q, q + sources[0] + sk + q]
        out += [q + piece + sk + q for piece in sources[1:-1]]
        out.append(q + sources[-1])
        return tuple(out)


#: what JSON writes as it is in either spelling (printable ASCII but the quote and the
#: backslash), and the line break that joins names
_PLAIN_BYTES = bytes(b for b in range(32, 127) if b not in b'"\\') + b"\n"


def _plain(text: str) -> bool:
    """Whether ``text`` holds only ``_PLAIN_BYTES`` (checked at C speed)."""
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_BYTES)


def file_json(f: OutputFile, templates: _Templates | None = None) -> str:
    """``OutputFileDocument(...).model_dump_json()`` of ``f``."""
    if isinstance(f.tensors, OutputRows):
        if templates is None:
            templates = _Templates(tensor_json, '"name":""', '"source":""', _c)
        tensors = ",".join(templates(f.tensors))
    else:
        tensors = ",".join(map(tensor_json, f.tensors))
    return (
        f'{{"name":{_c(f.name)},"tensors":[{tensors}],"nbytes":{f.nbytes},"rank":{_opt(f.rank)}}}'
    )


def plan_head_json(plan: Plan) -> str:
    """The compact JSON of ``plan`` without its files (``PlanDocument``'s ``model_dump_json``
    with ``files`` excluded): the first part the plan hash reads."""
    return "".join(_plan_head_pieces(plan))


def _plan_head_pieces(plan: Plan, block: int = 1024) -> Iterator[str]:
    """``plan_head_json`` in pieces: the provenance (one entry per source tensor) written
    here, ``block`` sources a piece, the rest by pydantic."""
    head = _head_dump(plan, provenance=False)
    head["files"] = []
    text = plan_document().model_validate(head).model_dump_json(exclude={"files"})
    # the last such key: a config value cannot hold it (quotes there are escaped)
    before, sep, after = text.rpartition(',"provenance":{},"summary":')
    assert sep, "the document's field order changed"
    del text
    yield f'{before},"provenance":{{'
    items = iter(plan.provenance.items())
    lead = ""
    while rows := [
        f"{_c(k)}:[{','.join(map(_c, v))}]" for k, v in itertools.islice(items, block)
    ]:
        yield lead + ",".join(rows)
        lead = ","
    yield f'}},"summary":{after}'


def _provenance_items(plan: Plan) -> Any:
    """``(source, outputs)`` in source-name order (a ``Provenance`` view already is)."""
    prov = plan.provenance
    if isinstance(prov, Provenance):
        return prov.items()
    return ((k, prov[k]) for k in sorted(prov))


def plan_compact_json(plan: Plan) -> str:
    """``PlanDocument``'s ``model_dump_json`` of ``plan``: compact, declaration order."""
    templates = _Templates(tensor_json, '"name":""', '"source":""', _c)
    files = ",".join(file_json(f, templates) for f in plan.files)
    # put ``files`` back in its declared place: after ``options``
    before, sep, after = plan_head_json(plan).partition(',"dropped":')
    return f'{before},"files":[{files}]{sep}{after}'


def plan_sha256(plan: Plan) -> str:
    """A stable fingerprint of everything the plan asks for (the manifest's ``plan_sha256``).

    Hashed file by file (a 100k-tensor plan never exists as one JSON string in memory): the
    plan without its files, then each file's compact JSON, each prefixed by its length.
    """
    h = hashlib.sha256()
    # the head (the provenance: one entry per source tensor) is hashed in pieces, its
    # length counted in a first pass
    length = sum(len(piece.encode()) for piece in _plan_head_pieces(plan))
    h.update(length.to_bytes(8, "little"))
    for piece in _plan_head_pieces(plan):
        h.update(piece.encode())
    templates = _Templates(tensor_json, '"name":""', '"source":""', _c)
    for data in (file_json(f, templates) for f in plan.files):
        raw = data.encode()
        h.update(len(raw).to_bytes(8, "little") + raw)
    return h.hexdigest()


# -- pretty (``ckpt plan --format json``) -------------------------------------------------------


def _a(s: str) -> str:
    return encode_basestring_ascii(s)


def _pretty_value(value: Any, level: int) -> str:
    """``json.dumps(value, indent=2, sort_keys=True)`` nested ``level`` deep."""
    text = json.dumps(value, indent=2, sort_keys=True)
    return text.replace("\n", "\n" + "  " * level) if level else text


def _scalars(items: list[str], i1: str) -> str:
    if not items:
        return "[]"
    i2 = i1 + "  "
    return "[" + i2 + ("," + i2).join(items) + i1 + "]"


def _piece_pretty(p: Piece, i2: str) -> str:
    i3 = i2 + "  "
    i4 = i3 + "  "
    i5 = i4 + "  "
    pads = [
        f'{{{i5}"amount": {d.amount},{i5}"dim": {d.dim},{i5}"fill": {_a(d.fill)}{i4}}}'
        for d in p.pads
    ]
    slices = [
        f'{{{i5}"dim": {r.dim},{i5}"start": {r.start},{i5}"stop": {r.stop}{i4}}}' for r in p.slices
    ]
    return (
        f'{{{i3}"pads": {_scalars(pads, i3)},{i3}"slices": {_scalars(slices, i3)},'
        f'{i3}"source": {_a(p.source)}{i2}}}'
    )


class _PrettyTensors:
    """A tensor's pretty JSON with the repeated parts (shapes, ops lists, single-piece tensors
    but for their names) written once per distinct value: a full-size plan has ~92k tensors
    but a few hundred distinct shapes."""

    def __init__(self, i0: str) -> None:
        self.i0, self.i1, self.i2 = i0, i0 + "  ", i0 + "    "
        self.shapes: dict[tuple[int, ...], str] = {}
        self.ops: dict[tuple[str, ...], str] = {}
        #: a single-piece tensor's text around its name and its source's, by what repeats
        self.whole: dict[tuple[object, ...], tuple[str, str, str]] = {}

    def __call__(self, t: OutputTensor) -> str:
        pieces = t.pieces
        if len(pieces) != 1:
            return self.text(t)
        # a single-piece tensor: everything but its two names repeats over every expert of a
        # layer (the planner shares the shape and ops tuples: hashed by value, cheaply)
        p = pieces[0]
        shape = t.shape if isinstance(t.shape, tuple) else tuple(t.shape)
        ops = t.ops if isinstance(t.ops, tuple) else tuple(t.ops)
        key = (shape, ops, t.dtype, t.layer, t.combine, t.axis, t.fill, p.slices, p.pads)
        parts = self.whole.get(key)
        if parts is None:
            text = self.text(OutputTensor("", t.dtype, t.shape, (p._replace(source=""),),
                                          t.combine, t.axis, t.ops, t.layer, t.fill))  # fmt: skip
            head, rest = text.split('"name": ""', 1)
            middle, tail = rest.split('"source": ""', 1)
            parts = self.whole[key] = (head, middle, tail)
        return f'{parts[0]}"name": {_a(t.name)}{parts[1]}"source": {_a(p.source)}{parts[2]}'

    def text(self, t: OutputTensor) -> str:
        """``t`` as ``json.dumps(indent=2, sort_keys=True)`` writes it at this depth."""
        i0, i1 = self.i0, self.i1
        shape = self.shapes.get(key := tuple(t.shape))
        if shape is None:
            shape = self.shapes[key] = _scalars([str(s) for s in key], i1)
        ops = self.ops.get(okey := tuple(t.ops))
        if ops is None:
            ops = self.ops[okey] = _scalars([_a(o) for o in okey], i1)
        pieces_text = _scalars([_piece_pretty(p, self.i2) for p in t.pieces], i1)
        fill = "null" if t.fill is None else _a(t.fill)
        layer = "null" if t.layer is None else str(t.layer)
        return (
            f'{{{i1}"axis": {t.axis},{i1}"combine": {_a(t.combine)},{i1}"dtype": {_a(t.dtype)},'
            f'{i1}"fill": {fill},{i1}"layer": {layer},{i1}"name": {_a(t.name)},{i1}"ops": {ops},'
            f'{i1}"pieces": {pieces_text},{i1}"shape": {shape}{i0}}}'
        )


def _file_pretty(f: OutputFile, i0: str, tensor: _PrettyTensors, rows: _Templates) -> str:
    i1 = i0 + "  "
    if isinstance(f.tensors, OutputRows):
        tensors = _scalars(list(rows(f.tensors)), i1)
    else:
        tensors = _scalars([tensor(t) for t in f.tensors], i1)
    rank = "null" if f.rank is None else str(f.rank)
    return (
        f'{{{i1}"name": {_a(f.name)},{i1}"nbytes": {f.nbytes},{i1}"rank": {rank},'
        f'{i1}"tensors": {tensors}{i0}}}'
    )


def _provenance_pretty(plan: Plan, i0: str, block: int = 4096) -> Iterator[str]:
    """The pretty provenance object, ``block`` sources a piece."""
    if not plan.provenance:
        yield "{}"
        return
    i1, i2 = i0 + "  ", i0 + "    "
    rows: list[str] = []
    sep = "{" + i1
    for k, v in _provenance_items(plan):
        key = _a(k)
        if len(v) == 1:  # most sources: one output, often under the same name
            rows.append(f"{key}: [{i2}{key if v[0] == k else _a(v[0])}{i1}]")
        else:
            rows.append(f"{key}: {_scalars([_a(n) for n in v], i1)}")
        if len(rows) == block:
            yield sep + ("," + i1).join(rows)
            rows, sep = [], "," + i1
    yield (sep + ("," + i1).join(rows) if rows else "") + i0 + "}"


def plan_json_chunks(plan: Plan) -> Iterator[str]:
    """``plan_json_text`` in pieces (one per file and per top-level field), made as they
    are written: a full-size plan's 60 MB never exist as one string."""
    head = _head_dump(plan, provenance=False)
    i0, i1 = "\n", "\n  "
    yield "{"
    keys = sorted([*head, "files", "provenance"])
    for n, key in enumerate(keys):
        sep = "," if n + 1 < len(keys) else ""
        yield f"{i1}{_a(key)}: "
        if key == "files":
            if not plan.files:
                yield "[]" + sep
                continue
            yield "["
            tensor = _PrettyTensors(i1 + "      ")
            rows = _Templates(tensor.text, '"name": ""', '"source": ""', _a)
            for k, f in enumerate(plan.files):
                comma = "," if k + 1 < len(plan.files) else ""
                yield f"{i1}  {_file_pretty(f, i1 + '  ', tensor, rows)}{comma}"
            yield f"{i1}]{sep}"
        elif key == "provenance":
            yield from _provenance_pretty(plan, i1)
            yield sep
        else:
            yield _pretty_value(head[key], 1) + sep
    yield i0 + "}"


def plan_json_text(plan: Plan) -> str:
    """``ckpt plan --format json``: ``json.dumps(plan_dump(plan), indent=2, sort_keys=True)``,
    fast."""
    return "".join(plan_json_chunks(plan))


# -- reading ------------------------------------------------------------------------------------

def _to_record(value: Any, record_of: Mapping[type, type]) -> Any:
    """A validated document value as the records hold it (documents -> records, recursively)."""
    record = record_of.get(type(value))
    if record is not None:
        fields = {n: _to_record(getattr(value, n), record_of) for n in type(value).model_fields}
        return record(**fields)
    if isinstance(value, list):
        return [_to_record(v, record_of) for v in value]
    return value


def plan_load(data: Any) -> Plan:
    """A plan from its JSON document (plain data, or the text), validated by ``PlanDocument``."""
    document = plan_document()
    if isinstance(data, (str, bytes)):
        doc = document.model_validate_json(data)
    else:
        doc = document.model_validate(data)
    plan = _to_record(doc, {model: record for record, model in document_models().items()})
    assert isinstance(plan, Plan)
    return plan
