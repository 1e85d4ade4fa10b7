"""What the planned outputs' names must satisfy, checked once every source is placed.

``plan.outputs`` logs, per output row as it adds them (``OutputLog``), what the checks need of
its name (the name itself is the output table's): the recipe rules that made it, whether a
keep rule kept it, the loader's name where it differs, its place among its source's outputs.
``check_names`` then finds, in plan order: two sources written under one name, sources no
rule matched, and (where the loader applies the rules again) names it would rename again.

Example::

    check_names(inputs, planned.outputs, log, perm)
    # InputError: ...: tensors 'a.weight' and 'b.weight' would both be written as 'c.weight' ...
"""

from __future__ import annotations

import numpy as np

from checkpoint_tool.catalog.patterns import NAME_BLOCK
from checkpoint_tool.errors import InputError, UsageError, first_few
from checkpoint_tool.plan.inputs import PlanInputs
from checkpoint_tool.plan.output_table import OutputTable


class OutputLog:
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


def check_names(inputs: PlanInputs, table: OutputTable, log: OutputLog, perm: np.ndarray) -> None:
    """Collisions, unmatched tensors and the loader's fixed points, in plan order (``perm``:
    each output row's number in ``log``)."""
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
