"""Every source tensor -> its output tensor(s) or a reasoned drop (names, pieces, shapes).

The sources are taken in name order, as columns (``catalog.table``, ``resolved.columns``):

1. outside ``--layers``: dropped (rule ``layers``);
2. the recipe's drop rules;
3. a 3-D fused expert tensor: ``unfuse`` (one tensor per expert and projection);
4. a shared-expert tensor of an FSE layer: ``redirect`` (one output per routed slot, each
   chunk padded to the padded intermediate size);
5. any other expert tensor: ``pad`` to the padded intermediate size (routed) or to the padded
   shared width (shared experts that stay shared), or ``keep`` when nothing pads;
6. everything else: ``keep``.

Steps 5 and 6 are the bulk (about every tensor of a full-size model): their names go through
the recipe's rules as columns of ``NAME_BLOCK`` names (``RuleSet.rename_all``; no step holds
every name as a string) and each distinct placement is made once (``plan.kinds``; the 256
experts of a layer and projection share one ``Form``). Steps 3 and 4 go tensor by tensor. The result is an ``OutputTable`` whose rows reference the
catalog's rows, in plan order (by source name; a source's outputs in placement order). Then
the checks: collisions (two sources, one name), unmatched tensors and, when the loader
re-applies the rules, names it would rename again.

Example::

    planned = plan_outputs(inputs)
    planned.tensors[0]
    # OutputTensor(name='model.embed_tokens.weight', dtype='BF16', shape=[512, 256],
    #              pieces=(Piece(source='model.embed_tokens.weight'),), ops=('copy',))
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from operator import ne
from typing import NamedTuple

import numpy as np

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.grouping import dense_ids, first_rows
from checkpoint_tool.catalog.patterns import NAME_BLOCK
from checkpoint_tool.catalog.safetensors_format import DTYPE_NAMES, storage_shape, tensor_nbytes
from checkpoint_tool.errors import InputError, UsageError, first_few
from checkpoint_tool.plan.experts import ExpertColumns, ExpertPart, expert_columns
from checkpoint_tool.plan.inputs import PlanInputs, layer_column
from checkpoint_tool.plan.kinds import PlacementCache, check_intermediate, pad, redirect, unfuse
from checkpoint_tool.plan.model import COPY_OPS, DroppedTensor
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


class _Log:
    """Per output row, in the order rows are added: what the checks need of its name (the
    name itself is the table's): its rename history, whether a keep rule kept it, the engine
    name where it differs from the written one, its place among its source's outputs."""

    def __init__(self) -> None:
        self.histories: dict[tuple[str, ...], int] = {(): 0}
        self._steps: list[np.ndarray] = []
        self._kept: list[np.ndarray] = []
        self._sub: list[np.ndarray] = []
        self.engine: dict[int, str] = {}
        self.rows = 0

    def add(
        self,
        steps: np.ndarray,
        histories: list[tuple[str, ...]],
        kept: np.ndarray,
        sub: np.ndarray,
        engine: dict[int, str],
    ) -> None:
        """Rows whose histories are ``histories[steps[k]]`` (``engine``: by row within)."""
        number = np.array([self.histories.setdefault(h, len(self.histories)) for h in histories])
        self._steps.append(number[steps] if len(steps) else np.zeros(0, np.int64))
        self._kept.append(np.asarray(kept, bool))
        self._sub.append(np.asarray(sub, np.int64))
        self.engine.update((self.rows + k, e) for k, e in engine.items())
        self.rows += len(steps)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(history number, kept, place among the source's outputs)`` of every row."""
        return tuple(np.concatenate(c) if c else np.zeros(0, np.int64)  # type: ignore[return-value]
                     for c in (self._steps, self._kept, self._sub))  # fmt: skip


def plan_outputs(inputs: PlanInputs) -> Planned:
    """Place every source tensor of ``inputs.catalog`` (see the module docstring)."""
    table = inputs.catalog.table
    order = table.by_name()
    out = Planned(OutputTable(table))
    rows = _drops(inputs, out, order)
    cols = inputs.resolved.columns
    experts = expert_columns(inputs.facts, cols)
    kind = experts.kind_of(cols.module[rows])
    one_by_one = np.array(
        [p.unfused or (p.kind == "shared" and bool(inputs.fse_layers.get(p.layer.layer)))
         for p in experts.kinds] + [False],
        bool,
    )[kind]  # fmt: skip
    log = _Log()
    cutter = _Cutter(inputs)
    _place_bulk(inputs, out, experts, rows[~one_by_one], cutter, log)
    for row in rows[one_by_one].tolist():
        part = experts.parts[int(cols.module[row])]
        _record(inputs, out, row, part, _place(inputs, table.entry(row), row, part, cutter), log)
    # plan order: by source name, then a source's outputs in the order they were placed
    rank = np.empty(len(table), np.int64)
    rank[rows] = np.arange(len(rows))
    perm = np.lexsort((log.columns()[2], rank[out.outputs.columns()[0]]))
    out.outputs.reorder(perm)
    _check(inputs, out, log, perm)
    return out


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


def _place_bulk(
    inputs: PlanInputs,
    out: Planned,
    experts: ExpertColumns,
    rows: np.ndarray,
    cutter: _Cutter,
    log: _Log,
) -> None:
    """Steps 5 and 6 for ``rows`` (name order): one rename column, and one placement per
    distinct (dtype, shape, expert kind, weight, rename history) of the rows."""
    cols, table = inputs.resolved.columns, inputs.catalog.table
    n = len(rows)
    renamed = _rename_bulk(inputs, out, rows)
    changed, role = renamed.changed, cols.role[rows]
    kind = experts.kind_of(cols.module[rows])
    shape_id, shapes = table.shape_ids()
    dtype = table.dtype_codes()
    padding = (kind >= 0) & inputs.geometry.pads

    def padded(column: np.ndarray) -> np.ndarray:
        """``column`` where the row is padded, else -1 (int64: the columns are often uint8)."""
        return np.where(padding, column.astype(np.int64), -1)

    weight = padded(cutter.weight_row[cols.module[rows]])
    # a 3-D fused expert tensor kept fused (``in_out`` order) is its own weight: no suffix
    fused_3d = np.array([p.own_weight for p in experts.kinds] + [False], bool)[kind]
    weight = np.where(padding & fused_3d, rows, weight)
    w = np.maximum(weight, 0)
    columns = [
        dtype[rows], shape_id[rows], renamed.step_ids, np.frombuffer(renamed.kept, np.uint8),
        changed, padding, padded(role), padded(kind), padded(dtype[w]), padded(shape_id[w]),
        padded(cols.scheme[w]), weight < 0,
    ]  # fmt: skip
    inverse = dense_ids(*columns)
    count = int(inverse.max()) + 1 if len(inverse) else 0
    first = first_rows(inverse, count)
    form_of = np.empty(count, np.int32)
    size_of = np.empty(count, np.int64)
    outputs = out.outputs
    for u in np.argsort(first, kind="stable").tolist():  # in name order: the first error first
        k = int(first[u])
        row = int(rows[k])
        steps = renamed.histories[renamed.step_ids[k]]
        kept = bool(renamed.kept[k])
        how = "renamed" if changed[k] else "same"
        if padding[k]:
            placement = cutter.bulk_pad(row, experts.kinds[kind[k]])
            form = _form(DTYPE_NAMES[dtype[row]], placement, _ops(placement.ops, steps, kept, how))
            size = -1 if placement.copy else tensor_nbytes(form.dtype, form.shape)
        else:
            ops = _ops(COPY_OPS, steps, kept, how)
            form = Form(
                DTYPE_NAMES[dtype[row]], shapes[shape_id[row]], (((), ()),), ops=ops, copy=True
            )
            size = -1
        form_of[u], size_of[u] = outputs.form_id(form), size
    sizes = size_of[inverse]
    own_size = sizes < 0
    sizes[own_size] = table.nbytes_column()[rows[own_size]]
    kinds = np.where(changed, KIND["renamed"], KIND["kept"]).astype(np.uint8)
    moe_layer = np.array([p.layer.layer for p in experts.kinds] + [-1], np.int32)[kind]
    outputs.extend(rows, form_of[inverse], moe_layer, kinds, kind >= 0, sizes, renamed.own)
    kept_rows = np.frombuffer(renamed.kept, np.uint8).astype(bool)
    log.add(renamed.step_ids, renamed.histories, kept_rows, np.zeros(n, np.int64), renamed.engine)


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
    inputs: PlanInputs, entry: TensorEntry, row: int, part: ExpertPart, cutter: _Cutter
) -> list[tuple[Renamed, Placement]]:
    """Steps 3 and 4: the placements of 3-D fused expert tensor or FSE shared-expert tensor
    ``entry`` (catalog row ``row``) and the names they are written as."""
    cols = inputs.resolved.columns
    name = entry.name
    scheme = cols.schemes[cols.scheme[row]]
    role = ROLES[cols.role[row]]
    is_scale = role == "scale"
    rename = partial(inputs.rules.rename, scheme=scheme, drop_checked=True)
    geo = inputs.geometry
    layer = part.layer
    if part.unfused:
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
    log: _Log,
) -> None:
    """Add the outputs of one source tensor placed one by one (steps 3 and 4)."""
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


def _check(inputs: PlanInputs, out: Planned, log: _Log, perm: np.ndarray) -> None:
    """Collisions, unmatched tensors and the loader's fixed points, in plan order (``perm``:
    each output row's number in ``log``)."""
    table = out.outputs
    source = table.columns()[0].tolist()
    name_of = inputs.catalog.table.name
    steps, kept, _ = (c[perm] for c in log.columns())
    history = {k: h for h, k in log.histories.items()}
    if _collides(inputs, table):
        seen: dict[str, int] = {}
        row = 0
        for block in table.name_blocks(NAME_BLOCK):
            for name in block:
                first = seen.setdefault(name, row)
                if first != row:
                    a, b = history[int(steps[first])], history[int(steps[row])]
                    raise InputError(
                        f"{inputs.catalog.root}: tensors {name_of(source[first])!r} and "
                        f"{name_of(source[row])!r} would both be written as {name!r} (rules "
                        f"{', '.join(a) or 'none'} / {', '.join(b) or 'none'}); add a drop "
                        "rule for one of them in a recipe file (--recipe PATH)"
                    )
                row += 1
    unmatched = [name_of(source[row]) for row in np.flatnonzero(steps == 0).tolist()]
    if unmatched:
        raise InputError(
            f"{inputs.catalog.root}: {len(unmatched)} tensor(s) match no rule of recipe "
            f"{inputs.recipe.name}: {first_few(unmatched)}; give the right "
            "--recipe, or add drop/keep/accept rules in a recipe file (--recipe PATH)"
        )
    if not inputs.recipe.loader_reapplies_rules:
        return
    order = perm.tolist()
    start = 0
    for block in table.name_blocks(NAME_BLOCK):
        for k in np.flatnonzero(~kept[start : start + len(block)]).tolist():
            row, name = start + k, block[k]
            engine = log.engine.get(order[row], name)
            again = inputs.rules.loader_view(name)
            if again != engine:
                raise UsageError(
                    f"recipe {inputs.recipe.name}: {name_of(source[row])!r} is written as "
                    f"{name!r}, which the loader renames again to {again!r} instead of "
                    f"{engine!r}; mark the rule that is not idempotent `at_load: true` in the "
                    "recipe"
                )
        start += len(block)


def _collides(inputs: PlanInputs, table: OutputTable) -> bool:
    """Would two outputs have one name? Sources' names are distinct, so only a name a rule
    or the planner made can collide: with another such name, or with a source written under
    its own name."""
    own = [n for n in table.names if n is not None]
    if len(set(own)) != len(own):
        return True
    if not own:
        return False
    as_is = np.zeros(len(inputs.catalog.table), bool)  # sources written under their own name
    source = table.columns()[0]
    as_is[source[np.array([n is None for n in table.names], bool)]] = True
    rows = inputs.catalog.table.rows_of(own)
    return any(r is not None and as_is[r] for r in rows)
