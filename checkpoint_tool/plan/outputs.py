"""Every source tensor -> its output tensor(s) or a reasoned drop (names, pieces, shapes).

The sources are taken in name order, as columns (``catalog.table``, ``resolved.columns``):

1. outside ``--layers``: dropped (rule ``layers``); then the recipe's drop rules;
2. the rest are placed by the kinds of ``plan.kinds``, the one ``kinds.rule_for`` picks from
   each tensor's expert part: ``unfuse`` (a 3-D fused expert tensor: one tensor per expert
   and projection), ``redirect`` (a shared-expert tensor of an FSE layer: one output per
   routed slot), ``pad`` (any other expert tensor, to the padded intermediate size, or to the
   padded shared width for shared experts that stay shared), ``keep`` (everything else).

``keep`` and ``pad`` are the bulk (about every tensor of a full-size model): their names go
through the recipe's rules as columns of ``NAME_BLOCK`` names (``RuleSet.rename_all``; no step
holds every name as a string), and the kind is applied once per distinct form (``_PerForm``:
the 256 experts of a layer and projection share one ``Form``). ``unfuse`` and ``redirect``
go tensor by tensor (each output has a name of its own). The result is an ``OutputTable``
whose rows reference the catalog's rows, in plan order (by source name; a source's outputs
in placement order). Then the checks: collisions (two sources, one name), unmatched tensors
and, when the loader re-applies the rules, names it would rename again.

Example::

    planned = plan_outputs(inputs)
    planned.tensors[0]
    # OutputTensor(name='model.embed_tokens.weight', dtype='BF16', shape=[512, 256],
    #              pieces=(Piece(source='model.embed_tokens.weight'),), ops=('copy',))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from operator import ne
from typing import NamedTuple

import numpy as np

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.grouping import dense_ids, first_rows
from checkpoint_tool.catalog.patterns import NAME_BLOCK
from checkpoint_tool.catalog.safetensors_format import DTYPE_NAMES, storage_shape, tensor_nbytes
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.experts import ExpertColumns, ExpertPart, expert_columns
from checkpoint_tool.plan.inputs import PlanInputs, layer_column
from checkpoint_tool.plan.kinds import (
    KEEP,
    PAD,
    UNFUSE,
    PlacementCache,
    check_intermediate,
    pad,
    redirect,
    rule_for,
    unfuse,
)
from checkpoint_tool.plan.model import COPY_OPS, DroppedTensor
from checkpoint_tool.plan.name_checks import OutputLog, check_names
from checkpoint_tool.plan.output_table import KIND, Form, OutputRows, OutputTable
from checkpoint_tool.plan.pieces import Placement
from checkpoint_tool.quant.resolve import split_tensor_name
from checkpoint_tool.quant.resolved import ROLE_CODES, ROLES
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.recipes import Renamed


class OutputFacts(NamedTuple):
    """What reports need of an output a layout builds itself (not a row of the table)."""

    kind: str
    padded: bool
    expert: bool
    nbytes: int


@dataclass
class Planned:
    """The planned output tensors (rows of ``outputs``, not yet grouped into files) and the
    bookkeeping reports need."""

    outputs: OutputTable
    dropped: list[DroppedTensor] = field(default_factory=list)
    #: source module -> output modules it was renamed/redirected to (config edits)
    module_renames: dict[str, set[str]] = field(default_factory=dict)
    #: source modules redirected into routed slots (FSE)
    redirected_modules: set[str] = field(default_factory=set)
    #: 3-D fused expert tensors written as one tensor per expert (their names)
    unfused_modules: set[str] = field(default_factory=set)
    #: outputs a layout builds from the planned ones (vllm-sharded's engine parameters)
    built: dict[str, OutputFacts] = field(default_factory=dict)

    @property
    def tensors(self) -> OutputRows:
        """Every planned output, as records made on demand, in plan order."""
        return self.outputs.rows(np.arange(len(self.outputs)))


def plan_outputs(inputs: PlanInputs) -> Planned:
    """Place every source tensor of ``inputs.catalog`` (see the module docstring)."""
    table = inputs.catalog.table
    order = table.by_name()
    out = Planned(OutputTable(table))
    rows = _drops(inputs, out, order)
    cols = inputs.resolved.columns
    experts = expert_columns(inputs.facts, cols)
    kind = experts.kind_of(cols.module[rows])
    rule = _rules(inputs, experts)[kind]
    log = OutputLog()
    cutter = _Cutter(inputs)
    bulk = rule <= PAD
    _place_per_form(inputs, out, experts, rows[bulk], kind[bulk], rule[bulk], cutter, log)
    for row, r in zip(rows[~bulk].tolist(), rule[~bulk].tolist(), strict=True):
        part = experts.parts[int(cols.module[row])]
        placed = _place(inputs, table.entry(row), row, part, r, cutter)
        _record(inputs, out, row, part, placed, log)
    # plan order: by source name, then a source's outputs in the order they were placed
    rank = np.empty(len(table), np.int64)
    rank[rows] = np.arange(len(rows))
    perm = np.lexsort((log.columns()[2], rank[out.outputs.columns()[0]]))
    out.outputs.reorder(perm)
    check_names(inputs, out.outputs, log, perm)
    return out


def _rules(inputs: PlanInputs, experts: ExpertColumns) -> np.ndarray:
    """``kinds.rule_for`` of each expert kind of ``experts``, and ``KEEP`` last (at -1: no
    expert), to be indexed by a kind column."""
    pads = inputs.geometry.pads
    rules = [
        rule_for(p, fse=bool(inputs.fse_layers.get(p.layer.layer)), pads=pads)
        for p in experts.kinds
    ]
    return np.array([*rules, KEEP], np.int8)


class _PerForm:
    """Rows grouped by equal values of key ``columns`` (everything their output's form
    depends on): each group is placed once, at its first row, and its form number and size
    go to all its rows.

    Example: ``_PerForm(np.array([7, 3, 7])).place(lambda k: (k, 1))`` -> per row
    ``(array([0, 1, 0]), array([1, 1, 1]))``: rows 0 and 2 share the placement of row 0.
    """

    def __init__(self, *columns: np.ndarray) -> None:
        self.inverse = dense_ids(*columns)
        count = int(self.inverse.max()) + 1 if len(self.inverse) else 0
        self.first = first_rows(self.inverse, count)

    def place(self, one: Callable[[int], tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """``one(k)`` -> ``(form number, size or -1)`` of each group's first row ``k``, the
        groups in row order (the first error is the first row's); per row, ``(form, size)``."""
        form = np.empty(len(self.first), np.int32)
        size = np.empty(len(self.first), np.int64)
        for u in np.argsort(self.first, kind="stable").tolist():
            form[u], size[u] = one(int(self.first[u]))
        return form[self.inverse], size[self.inverse]


def _drops(inputs: PlanInputs, out: Planned, order: np.ndarray) -> np.ndarray:
    """Record the ``--layers`` and recipe drops in name order; the rows left, in order."""
    dropped = np.zeros(len(order), bool)
    wanted = sorted(set(inputs.options.layers or ()))
    where = ",".join(map(str, wanted))
    rules, names_of = inputs.rules, inputs.catalog.table.names_of
    for a in range(0, len(order), NAME_BLOCK):
        names = names_of(order[a : a + NAME_BLOCK])
        outside = np.zeros(len(names), bool)
        if inputs.options.layers is not None:
            outside = ~np.isin(layer_column(names), wanted)
        hits = rules.drop_hits(names)
        hit = outside if hits is None else outside | np.fromiter(map(bool, hits), bool, len(names))
        dropped[a : a + len(names)] = hit
        for k in np.flatnonzero(hit).tolist():
            name = names[k]
            if outside[k]:
                reason = f"outside --layers {where}"
                out.dropped.append(DroppedTensor(name=name, rule="layers", reason=reason))
                continue
            drop = rules.drop_reason(name)
            assert drop is not None
            out.dropped.append(DroppedTensor(name=name, rule=drop[0], reason=drop[1]))
    return order[~dropped]


def _place_per_form(
    inputs: PlanInputs,
    out: Planned,
    experts: ExpertColumns,
    rows: np.ndarray,
    kind: np.ndarray,
    rule: np.ndarray,
    cutter: _Cutter,
    log: OutputLog,
) -> None:
    """``keep`` and ``pad`` for ``rows`` (name order; ``kind``: each row's expert kind,
    ``rule``: ``KEEP`` or ``PAD``): one rename column, and each distinct form placed once."""
    cols, table = inputs.resolved.columns, inputs.catalog.table
    renamed = _rename_bulk(inputs, out, rows)
    changed, kept = renamed.changed, np.frombuffer(renamed.kept, np.uint8)
    shape_id, shapes = table.shape_ids()
    dtype = table.dtype_codes()
    padding = rule == PAD

    def padded(column: np.ndarray) -> np.ndarray:
        """``column`` where the row is padded, else -1 (int64: the columns are often uint8)."""
        return np.where(padding, column.astype(np.int64), -1)

    weight = padded(cutter.weight_row[cols.module[rows]])
    # a 3-D fused expert tensor kept fused (``in_out`` order) is its own weight: no suffix
    fused_3d = np.array([p.own_weight for p in experts.kinds] + [False], bool)[kind]
    weight = np.where(padding & fused_3d, rows, weight)
    w = np.maximum(weight, 0)
    forms = _PerForm(
        dtype[rows], shape_id[rows], renamed.step_ids, kept, changed, padding,
        padded(cols.role[rows]), padded(kind), padded(dtype[w]), padded(shape_id[w]),
        padded(cols.scheme[w]), weight < 0,
    )  # fmt: skip
    outputs = out.outputs

    def one(k: int) -> tuple[int, int]:
        row = int(rows[k])
        history = renamed.histories[renamed.step_ids[k]]
        how = "renamed" if changed[k] else "same"
        dtype_name = DTYPE_NAMES[dtype[row]]
        if not padding[k]:
            ops = _ops(COPY_OPS, history, bool(kept[k]), how)
            form = Form(dtype_name, shapes[shape_id[row]], (((), ()),), ops=ops, copy=True)
            return outputs.form_id(form), -1
        placement = cutter.bulk_pad(row, experts.kinds[kind[k]])
        form = _form(dtype_name, placement, _ops(placement.ops, history, bool(kept[k]), how))
        size = -1 if placement.copy else tensor_nbytes(form.dtype, form.shape)
        return outputs.form_id(form), size

    form_of, sizes = forms.place(one)
    own_size = sizes < 0
    sizes[own_size] = table.nbytes_column()[rows[own_size]]
    kinds = np.where(changed, KIND["renamed"], KIND["kept"]).astype(np.uint8)
    moe_layer = np.array([p.layer.layer for p in experts.kinds] + [-1], np.int32)[kind]
    outputs.extend(rows, form_of, moe_layer, kinds, kind >= 0, sizes, renamed.own)
    log.add(
        renamed.step_ids, renamed.histories, kept.astype(bool), np.zeros(len(rows), np.int64),
        renamed.engine,
    )  # fmt: skip


class _BulkRenamed(NamedTuple):
    """``RuleSet.rename_all`` of the bulk rows, made ``NAME_BLOCK`` names at a time: per row its
    history number into ``histories``, whether a rule keeps it, whether its name changed and
    the new name (``own``, None when unchanged), and the loader's name where it differs."""

    step_ids: np.ndarray
    histories: list[tuple[str, ...]]
    kept: bytearray
    changed: np.ndarray
    own: list[str | None]
    engine: dict[int, str]


def _rename_bulk(inputs: PlanInputs, out: Planned, rows: np.ndarray) -> _BulkRenamed:
    """The names of ``rows`` through the recipe's rules, a block at a time; the modules a
    rename moves go to ``out.module_renames``."""
    cols, table = inputs.resolved.columns, inputs.catalog.table
    n = len(rows)
    scheme = cols.scheme[rows]
    schemes = [cols.schemes[s] for s in scheme.tolist()]
    is_scale = (cols.role[rows] == ROLE_CODES["scale"]).astype(np.uint8).tobytes()
    number: dict[tuple[str, ...], int] = {(): 0}
    step_ids = np.zeros(n, np.int32)
    kept = bytearray(n)
    changed = np.zeros(n, bool)
    own: list[str | None] = [None] * n
    engine: dict[int, str] = {}
    module_renames = out.module_renames
    for a in range(0, n, NAME_BLOCK):
        block = rows[a : a + NAME_BLOCK]
        sources = table.names_of(block)
        b = a + len(sources)
        renamed = inputs.rules.rename_all(sources, schemes[a:b], is_scale[a:b])
        ids = [number.setdefault(h, len(number)) for h in renamed.histories]
        step_ids[a:b] = np.array(ids, np.int32)[renamed.step_ids]
        kept[a:b] = renamed.kept
        moved = np.fromiter(map(ne, renamed.written, sources), bool, len(sources))
        changed[a:b] = moved
        for k in np.flatnonzero(moved).tolist():
            row, name, written = int(block[k]), sources[k], renamed.written[k]
            own[a + k] = written
            src_module = cols.module_names[cols.module[row]]
            out_module = split_tensor_name(written)[0] if src_module != name else written
            if out_module != src_module:
                module_renames.setdefault(src_module, set()).add(out_module)
        if renamed.engine is not renamed.written:  # at_load rules: the loader's names differ
            pairs = zip(renamed.engine, renamed.written, strict=True)
            engine.update((a + k, e) for k, (e, w) in enumerate(pairs) if e != w)
    return _BulkRenamed(step_ids, list(number), kept, changed, own, engine)


def _place(
    inputs: PlanInputs, entry: TensorEntry, row: int, part: ExpertPart, rule: int, cutter: _Cutter
) -> list[tuple[Renamed, Placement]]:
    """``unfuse`` or ``redirect`` (``rule``) of ``entry`` (catalog row ``row``): the
    placements and the names they are written as."""
    cols = inputs.resolved.columns
    name = entry.name
    scheme = cols.schemes[cols.scheme[row]]
    role = ROLES[cols.role[row]]
    is_scale = role == "scale"
    rename = partial(inputs.rules.rename, scheme=scheme, drop_checked=True)
    geo = inputs.geometry
    layer = part.layer
    if rule == UNFUSE:
        placed = unfuse(entry, role, inputs.codec(scheme), part, target=geo.routed_target())
        return [
            (replace(rename(per_expert, is_scale=False), source=name, unfused=True), p)
            for per_expert, p in placed
        ]
    width = layer.shared_chunk_size if part.index is not None else layer.shared_intermediate_size
    target = geo.routed_target()
    chunked = redirect(
        entry,
        split_tensor_name(name)[1],
        part,
        lambda ranges: cutter.cut(entry, row, part, ranges, target, width),
    )
    return [(rename(name, redirect_to=chunk.target, is_scale=is_scale), p) for chunk, p in chunked]


def _record(
    inputs: PlanInputs,
    out: Planned,
    row: int,
    part: ExpertPart,
    placed: list[tuple[Renamed, Placement]],
    log: OutputLog,
) -> None:
    """Add the outputs of one source tensor placed one by one (``unfuse``, ``redirect``)."""
    table, cols = inputs.catalog.table, inputs.resolved.columns
    entry = table.entry(row)
    source, dtype = entry.name, entry.dtype
    src_module = cols.module_names[cols.module[row]]
    for sub, (renamed, placement) in enumerate(placed):
        name = renamed.name
        assert name is not None
        how = "same" if name == source else "unfused" if renamed.unfused else "renamed"
        kind = (
            "kept" if name == source
            else "unfused" if renamed.unfused
            else "redirected" if renamed.redirected
            else "renamed"
        )  # fmt: skip
        form = out.outputs.form_id(
            _form(dtype, placement, _ops(placement.ops, renamed.steps, renamed.kept, how))
        )
        size = entry.nbytes if placement.copy else tensor_nbytes(dtype, tuple(placement.shape))
        out.outputs.add(
            row, form, layer=part.layer.layer, kind=KIND[kind], expert=True, nbytes=size,
            name=None if name == source else name,
        )  # fmt: skip
        loader = renamed.engine_name or name
        engine = {} if loader == name else {0: loader}
        log.add(
            np.zeros(1, np.int64),
            [renamed.steps],
            np.array([renamed.kept]),
            np.array([sub]),
            engine,
        )
        if renamed.unfused:
            out.unfused_modules.add(source)
        if name != source:
            out_module = split_tensor_name(name)[0] if src_module != source else name
            if out_module != src_module:
                out.module_renames.setdefault(src_module, set()).add(out_module)
            if renamed.redirected:
                out.redirected_modules.add(src_module)


def _form(dtype: str, placement: Placement, ops: tuple[str, ...]) -> Form:
    return Form(
        dtype,
        tuple(placement.shape),
        tuple((tuple(p.slices), tuple(p.pads)) for p in placement.pieces),
        placement.combine,
        placement.axis,
        ops,
        placement.copy,
        placement.padded,
    )


class _Cutter:
    """``pad`` for expert tensors: the module's weight gives the codec and the logical shape;
    logical shapes and placements are looked up once per distinct value."""

    def __init__(self, inputs: PlanInputs) -> None:
        self.inputs = inputs
        self.table = inputs.catalog.table
        cols = self.cols = inputs.resolved.columns
        self.weight_row = cols.weight_rows()
        self.cache: PlacementCache = {}
        self.codecs: dict[int, StorageFormat] = {}
        self.logical: dict[tuple, tuple[int, ...]] = {}

    def codec(self, scheme_id: int) -> StorageFormat:
        codec = self.codecs.get(scheme_id)
        if codec is None:
            codec = self.codecs[scheme_id] = self.inputs.codec(self.cols.schemes[scheme_id])
        return codec

    def bulk_pad(self, row: int, part: ExpertPart) -> Placement:
        """Step 5 for the expert tensor at ``row`` (``part``: its expert projection, or any
        of the same kind: the index does not matter here)."""
        layer = part.layer
        geo = self.inputs.geometry
        if part.kind == "routed":
            width, target = layer.moe_intermediate_size, geo.routed_target()
        else:
            width = (
                layer.shared_chunk_size
                if part.index is not None
                else layer.shared_intermediate_size
            )
            target = geo.shared_target(layer.n_shared, width)
        width, target = width * part.width_factor, target * part.width_factor
        ranges = [(k * width, (k + 1) * width) for k in range(part.segments)]
        return self.cut(self.table.entry(row), row, part, ranges, target, width)

    def _weight(self, row: int) -> int:
        weight = int(self.weight_row[self.cols.module[row]])
        if weight < 0:
            module = self.cols.module_names[self.cols.module[row]]
            raise InputError(
                f"{self.inputs.catalog.root}: tensor {self.table.name(row)!r} belongs to expert "
                f"module {module!r}, which has no weight tensor; the checkpoint is incomplete"
            )
        return weight

    def cut(
        self,
        entry: TensorEntry,
        row: int,
        part: ExpertPart,
        ranges: list[tuple[int, int]],
        target: int,
        width: int,
    ) -> Placement:
        weight = row if part.own_weight else self._weight(row)
        w_entry = entry if weight == row else self.table.entry(weight)
        codec = self.codec(int(self.cols.scheme[weight]))
        key = (codec, w_entry.dtype, w_entry.shape)
        logical = self.logical.get(key)
        if logical is None:
            storage = storage_shape(w_entry.dtype, w_entry.shape, name=w_entry.name)
            logical = self.logical[key] = tuple(codec.logical_shape(storage))
        check_intermediate(w_entry, part, logical[part.dim % len(logical)], width * part.segments)
        return pad(
            entry,
            ROLES[self.cols.role[row]],
            codec,
            logical,
            part,
            ranges,
            target=target,
            width=width,
            cache=self.cache,
        )


def _ops(ops: tuple[str, ...], steps: tuple[str, ...], kept: bool, how: str) -> tuple[str, ...]:
    """The placement's ops plus what the recipe's rules did to the name (``how``: written
    under its ``same`` name, ``unfused`` from a 3-D tensor, or ``renamed``)."""
    if how == "unfused":
        return ops
    if how == "same":
        return (*ops, f"keep ({steps[-1]})") if kept else ops
    rule_steps = [s for s in steps if s != "fse"]
    if kept:
        return (*ops, f"keep ({rule_steps[-1]})")
    if rule_steps:
        return (*ops, f"rename ({', '.join(rule_steps)})")
    return ops
