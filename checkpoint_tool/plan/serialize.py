"""A plan's JSON, both ways: ckpt's own encoding of the plan records of ``plan.model``.

The encoding is the plan as plain data (``plan_dump``: each record an object of its fields,
named tuples and sequences lists, a piece's ``requant`` only where it has one) in ``json``'s
spelling with sorted keys and ASCII escapes, in two layouts:

- pretty (``indent=2``): ``ckpt plan --format json`` (``plan_json_text`` / ``plan_json_chunks``);
- canonical (no whitespace): ``plan_compact_json``; ``plan_sha256`` hashes it as lines: the
  plan without its files, then one line per file (``file_json``), so a 500k-tensor plan is
  hashed file by file and never held as one string.

A full-size plan has ~92k tensors, so the writers are templates made once per distinct tensor
form, each equal to ``json.dumps(plan_dump(plan), sort_keys=True, ...)`` (a test holds them to
it). Reading back validates with pydantic models generated from the records
(``document_models``, ``plan_load``). Manifests written before this encoding hashed pydantic's
compact JSON instead: ``plan.legacy_hash``.

Example::

    plan_json_text(plan)[:40]   # '{\\n  "ckpt_version": "0.1.0",\\n  "config": {'
    plan_compact_json(plan)[:30]  # '{"ckpt_version":"0.1.0","confi'
    plan_load(json.loads(text)) == plan          # True
    plan_sha256(plan)                            # '3b1f...'
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _a
from typing import Any, NamedTuple, Union

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
    Built on first use: writing a plan never needs them."""
    models: dict[type, type[BaseModel]] = {}
    for record in RECORDS:
        models[record] = _document_model(record, models)
    return models


def plan_document() -> type[BaseModel]:
    """The document model of a whole plan (``PlanDocument``)."""
    return document_models()[Plan]


# -- plain data ---------------------------------------------------------------------------------


def piece_dump(p: Piece) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": p.source,
        "slices": [{"dim": r.dim, "start": r.start, "stop": r.stop} for r in p.slices],
        "pads": [{"dim": d.dim, "amount": d.amount, "fill": d.fill} for d in p.pads],
    }
    if p.requant is not None:
        out["requant"] = p.requant
    return out


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


def head_dump(plan: Plan, *, provenance: bool = True) -> dict[str, Any]:
    """Every field but ``files`` (and ``provenance`` unless asked for), as plain JSON data,
    in declaration order."""
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
    head = head_dump(plan)
    head["files"] = [file_dump(f) for f in plan.files]
    return {name: head[name] for name, _ in _record_fields(Plan)}


# -- the writers --------------------------------------------------------------------------------


class Layout(NamedTuple):
    """Where ``json.dumps`` puts whitespace: ``newline`` + ``indent`` per level before each
    item, ``colon`` after each key."""

    newline: str
    indent: str
    colon: str

    def at(self, level: int) -> str:
        """What precedes an item ``level`` deep, e.g. ``"\\n    "`` at level 2 (pretty)."""
        return self.newline + self.indent * level

    def dumps(self, value: Any, level: int) -> str:
        """``json.dumps(value, sort_keys=True)`` in this layout, nested ``level`` deep."""
        if not self.newline:
            return json.dumps(value, sort_keys=True, separators=(",", self.colon))
        text = json.dumps(value, indent=len(self.indent), sort_keys=True)
        return text.replace("\n", self.at(level)) if level else text


#: ``ckpt plan --format json``
PRETTY = Layout("\n", "  ", ": ")
#: what the plan hash reads
CANONICAL = Layout("", "", ":")


def _items(items: list[str], i1: str, i2: str) -> str:
    """A JSON array of written items: each after ``i2``, the bracket closing after ``i1``."""
    if not items:
        return "[]"
    return "[" + i2 + ("," + i2).join(items) + i1 + "]"


class _Tensors:
    """Tensors as JSON objects ``level`` deep, the repeated parts (shapes, ops lists, a
    single-piece tensor but for its two names) written once per distinct value: a full-size
    plan has ~92k tensors but a few hundred distinct forms."""

    def __init__(self, layout: Layout, level: int) -> None:
        self.i = [layout.at(level + k) for k in range(6)]
        self.c = c = layout.colon
        self.name_key, self.source_key = f'"name"{c}""', f'"source"{c}""'
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
        key = (shape, ops, t.dtype, t.layer, t.combine, t.axis, t.fill, p[1:])
        parts = self.whole.get(key)
        if parts is None:
            text = self.text(OutputTensor("", t.dtype, t.shape, (p._replace(source=""),),
                                          t.combine, t.axis, t.ops, t.layer, t.fill))  # fmt: skip
            head, rest = text.split(self.name_key, 1)
            middle, tail = rest.split(self.source_key, 1)
            c = self.c
            parts = self.whole[key] = (f'{head}"name"{c}', f'{middle}"source"{c}', tail)
        return f"{parts[0]}{_a(t.name)}{parts[1]}{_a(p.source)}{parts[2]}"

    def piece(self, p: Piece) -> str:
        c, (_, _, i2, i3, i4, i5) = self.c, self.i
        pads = [
            f'{{{i5}"amount"{c}{d.amount},{i5}"dim"{c}{d.dim},{i5}"fill"{c}{_a(d.fill)}{i4}}}'
            for d in p.pads
        ]
        slices = [
            f'{{{i5}"dim"{c}{r.dim},{i5}"start"{c}{r.start},{i5}"stop"{c}{r.stop}{i4}}}'
            for r in p.slices
        ]
        requant = "" if p.requant is None else f'{i3}"requant"{c}{_a(p.requant)},'
        return (
            f'{{{i3}"pads"{c}{_items(pads, i3, i4)},{requant}{i3}"slices"{c}'
            f'{_items(slices, i3, i4)},{i3}"source"{c}{_a(p.source)}{i2}}}'
        )

    def text(self, t: OutputTensor) -> str:
        """``t`` as ``json.dumps(sort_keys=True)`` writes it at this depth."""
        c, (i0, i1, i2) = self.c, self.i[:3]
        shape = self.shapes.get(key := tuple(t.shape))
        if shape is None:
            shape = self.shapes[key] = _items([str(s) for s in key], i1, i2)
        ops = self.ops.get(okey := tuple(t.ops))
        if ops is None:
            ops = self.ops[okey] = _items([_a(o) for o in okey], i1, i2)
        pieces = _items([self.piece(p) for p in t.pieces], i1, i2)
        fill = "null" if t.fill is None else _a(t.fill)
        layer = "null" if t.layer is None else str(t.layer)
        return (
            f'{{{i1}"axis"{c}{t.axis},{i1}"combine"{c}{_a(t.combine)},{i1}"dtype"{c}'
            f'{_a(t.dtype)},{i1}"fill"{c}{fill},{i1}"layer"{c}{layer},{i1}"name"{c}'
            f'{_a(t.name)},{i1}"ops"{c}{ops},{i1}"pieces"{c}{pieces},{i1}"shape"{c}{shape}{i0}}}'
        )


class _Rows:
    """An ``OutputRows`` file's tensors as text: one template per (form, layer), split
    around the name and each piece's source, so a tensor is the template with its two names
    put in. The source names are made per file (``names_of`` its rows), never all at once."""

    def __init__(self, tensors: _Tensors) -> None:
        self.tensors = tensors
        self.parts: dict[tuple[int, int], tuple[str, ...]] = {}
        self.plain: bool | None = None

    def __call__(self, rows: OutputRows) -> Iterator[str]:
        table = rows.table
        if self.plain is None:
            # names JSON writes as they are, between quotes
            own = "\n".join(n for n in table.names if n is not None)
            self.plain = _plain(table.sources.joined_names()) and _plain(own)
        parts_of, plain = self.parts, self.plain
        own_names = table.names
        picked = rows.rows
        source, form, layer = (c[picked] for c in table.columns()[:3])
        sources = table.sources.names_of(source)  # this file's, not every name at once
        if not plain:
            sources = list(map(_a, sources))
        keys = zip(form.tolist(), layer.tolist(), strict=True)
        for r, src, key in zip(picked.tolist(), sources, keys, strict=True):
            parts = parts_of.get(key)
            if parts is None:
                parts = parts_of[key] = self._split(self.tensors.text(table.record(r, "", "")))
            name = own_names[r]
            name = src if name is None else name if plain else _a(name)
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
        name_key, source_key = self.tensors.name_key, self.tensors.source_key
        head, rest = text.split(name_key, 1)
        sources = rest.split(source_key)
        nk, sk = name_key[:-2], source_key[:-2]
        q = '"' if self.plain else ""
        out = [head + nk + q, q + sources[0] + sk + q]
        out += [q + piece + sk + q for piece in sources[1:-1]]
        out.append(q + sources[-1])
        return tuple(out)


#: what JSON writes as it is (printable ASCII but the quote and the backslash), and the line
#: break that joins names
_PLAIN_BYTES = bytes(b for b in range(32, 127) if b not in b'"\\') + b"\n"


def _plain(text: str) -> bool:
    """Whether ``text`` holds only ``_PLAIN_BYTES`` (checked at C speed)."""
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_BYTES)


class _Files:
    """Files as JSON objects ``level`` deep in ``layout``."""

    def __init__(self, layout: Layout, level: int) -> None:
        self.i0, self.i1 = layout.at(level), layout.at(level + 1)
        self.c = layout.colon
        self.tensors = _Tensors(layout, level + 2)
        self.rows = _Rows(self.tensors)

    def __call__(self, f: OutputFile) -> str:
        c, i0, i1 = self.c, self.i0, self.i1
        i2 = self.tensors.i[0]
        if isinstance(f.tensors, OutputRows):
            tensors = _items(list(self.rows(f.tensors)), i1, i2)
        else:
            tensors = _items([self.tensors(t) for t in f.tensors], i1, i2)
        rank = "null" if f.rank is None else str(f.rank)
        return (
            f'{{{i1}"name"{c}{_a(f.name)},{i1}"nbytes"{c}{f.nbytes},{i1}"rank"{c}{rank},'
            f'{i1}"tensors"{c}{tensors}{i0}}}'
        )


def _provenance_items(plan: Plan) -> Any:
    """``(source, outputs)`` in source-name order (a ``Provenance`` view already is)."""
    prov = plan.provenance
    if isinstance(prov, Provenance):
        return prov.items()
    return ((k, prov[k]) for k in sorted(prov))


def _provenance(plan: Plan, layout: Layout, level: int, block: int = 4096) -> Iterator[str]:
    """The provenance object ``level`` deep, ``block`` sources a piece."""
    if not plan.provenance:
        yield "{}"
        return
    i0, i1, i2 = (layout.at(level + k) for k in range(3))
    c = layout.colon
    rows: list[str] = []
    sep = "{" + i1
    for k, v in _provenance_items(plan):
        key = _a(k)
        if len(v) == 1:  # most sources: one output, often under the same name
            rows.append(f"{key}{c}[{i2}{key if v[0] == k else _a(v[0])}{i1}]")
        else:
            rows.append(f"{key}{c}{_items([_a(n) for n in v], i1, i2)}")
        if len(rows) == block:
            yield sep + ("," + i1).join(rows)
            rows, sep = [], "," + i1
    yield (sep + ("," + i1).join(rows) if rows else "") + i0 + "}"


def plan_json_chunks(plan: Plan, layout: Layout = PRETTY, *, files: bool = True) -> Iterator[str]:
    """The plan's JSON in pieces (one per file and per top-level field), made as they are
    written: a full-size plan's 60 MB never exist as one string. ``files=False``: the plan
    without its ``files`` (the first line the plan hash reads)."""
    head = head_dump(plan, provenance=False)
    i0, i1 = layout.at(0), layout.at(1)
    c = layout.colon
    yield "{"
    keys = sorted([*head, *(["files"] if files else []), "provenance"])
    for n, key in enumerate(keys):
        sep = "," if n + 1 < len(keys) else ""
        yield f"{i1}{_a(key)}{c}"
        if key == "files":
            if not plan.files:
                yield "[]" + sep
                continue
            yield "["
            write = _Files(layout, 2)
            i2 = layout.at(2)
            for k, f in enumerate(plan.files):
                comma = "," if k + 1 < len(plan.files) else ""
                yield f"{i2}{write(f)}{comma}"
            yield f"{i1}]{sep}"
        elif key == "provenance":
            yield from _provenance(plan, layout, 1)
            yield sep
        else:
            yield layout.dumps(head[key], 1) + sep
    yield i0 + "}"


def plan_json_text(plan: Plan) -> str:
    """``ckpt plan --format json``: ``json.dumps(plan_dump(plan), indent=2, sort_keys=True)``,
    fast."""
    return "".join(plan_json_chunks(plan))


def plan_compact_json(plan: Plan) -> str:
    """The canonical JSON of the whole plan: ``json.dumps(plan_dump(plan), sort_keys=True,
    separators=(",", ":"))``."""
    return "".join(plan_json_chunks(plan, CANONICAL))


def file_json(f: OutputFile) -> str:
    """The canonical JSON of one file: ``json.dumps(file_dump(f), sort_keys=True,
    separators=(",", ":"))``."""
    return _Files(CANONICAL, 0)(f)


def plan_sha256(plan: Plan) -> str:
    """A stable fingerprint of everything the plan asks for (the manifest's ``plan_sha256``):
    the sha256 of the plan's canonical JSON as lines, the plan without its files first, then
    each file (canonical JSON holds no line break: one line each). Hashed file by file: a
    500k-tensor plan never exists as one JSON string."""
    h = hashlib.sha256()
    for chunk in plan_json_chunks(plan, CANONICAL, files=False):
        h.update(chunk.encode())
    write = _Files(CANONICAL, 0)
    for f in plan.files:
        h.update(b"\n" + write(f).encode())
    h.update(b"\n")
    return h.hexdigest()


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
