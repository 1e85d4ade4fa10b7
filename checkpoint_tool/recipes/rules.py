"""Rule kinds and the fixed order in which they rename one tensor.

For each source tensor name, the stages run in this order (``schema.RULE_ORDER``):

1. ``drop``      first matching rule removes the tensor (the reason is reported).
2. ``fse``       the planner redirects a shared-expert tensor of an FSE-enabled layer to its
                 routed slot ``n_routed + j`` (names from the model facts, in source naming).
3. ``keep``      first matching rule writes the name as it is; no later stage applies.
4. ``regex``     every matching rule, in file order: ``re.sub(match, replace, name)``.
5. ``substring`` every matching rule: the first occurrence of ``find`` is replaced.
6. ``prefix``    every matching rule: a leading ``from`` becomes ``to``.
7. ``suffix``    every matching rule: a trailing ``from`` becomes ``to``.
8. ``alias``     a scale's last component (``weight_scale`` / ``weight_scale_inv``) is set to
                 the spelling the target loader registers for the tensor's scheme.
9. ``accept``    names the recipe knows and leaves alone count as matched.

Stages 4-7 follow vLLM's ``WeightsMapper._map_name`` exactly (regex -> substring -> prefix ->
suffix, every matching entry applied in turn; vllm/model_executor/models/utils.py), so a recipe
can transcribe a model's ``hf_to_vllm_mapper`` rule by rule.

Example::

    rules = RuleSet(load_recipe("deepseek-v4-amd"), config={"expert_dtype": "fp4"})
    rules.rename("layers.3.ffn.experts.7.w1.scale").name
    # 'model.layers.3.ffn.experts.7.w1.weight_scale'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_not
from typing import Any

import numpy as np

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats import format_of
from checkpoint_tool.model.config_fields import config_field
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.recipes.schema import Recipe, When


def scale_spelling(scheme: Scheme | None) -> str | None:
    """The scale parameter name vLLM registers for ``scheme`` (None: no weight scale), as the
    format says (``Format.scale_param``).

    Block FP8 under Fp8Config naming (DeepSeek-V3 native ``quant_method: fp8``, DeepSeek-V4
    block-128 linears) -> ``weight_scale_inv``; Quark (any scheme), MXFP4 / MXFP8 / NVFP4 and
    per-tensor / per-channel FP8 -> ``weight_scale``. DeepSeek-V4.1 MXFP8 linears ([32, 32]
    blocks) go through ModelOptLinearMethod and register ``weight_scale``
    (vllm/models/deepseek_v41/amd/model.py, ``_linear_scale_param_name``).

    >>> scale_spelling(Scheme(format="fp8_block", block=(128, 128), source="deepseek_fp8"))
    'weight_scale_inv'
    """
    if scheme is None:
        return None
    return format_of(scheme).scale_param(scheme)


@dataclass(slots=True)
class Renamed:
    """What the rules did to one source tensor.

    ``name`` is the name written (None when dropped); ``engine_name`` the name the target
    loader ends up with after its own load-time rules (differs from ``name`` only through
    ``at_load`` rules). ``steps`` lists the rule ids that matched, in order.
    """

    source: str
    name: str | None
    engine_name: str | None
    steps: tuple[str, ...] = ()
    reason: str | None = None
    kept: bool = False
    redirected: bool = False
    #: one expert cut out of a 3-D fused expert tensor by the planner (``source`` is the 3-D
    #: tensor; the rules ran on the per-expert name)
    unfused: bool = False

    @property
    def dropped(self) -> bool:
        return self.name is None

    @property
    def matched(self) -> bool:
        return bool(self.steps)

    @property
    def renamed(self) -> bool:
        return self.name is not None and self.name != self.source


def when_matches(when: When | None, config: dict[str, Any] | None) -> bool:
    """True when every key of ``when`` has the wanted value in config.json (a list: equal to
    the list or any of its items; dotted keys walk into objects), read by ``config_field``
    (a multimodal wrapper's ``text_config`` first, as the model facts read it).

    A missing key never matches, except that ``expert_dtype`` defaults to ``"fp4"`` as in
    vLLM's DeepSeek-V4 loader (``getattr(config, "expert_dtype", "fp4")``).
    """
    if not when:
        return True
    for key, wanted in when.items():
        value = config_field(config, key)
        if value is None and key == "expert_dtype":
            value = "fp4"
        if value != wanted and not (isinstance(wanted, list) and value in wanted):
            return False
    return True


@dataclass
class _Rename:
    rule_id: str
    kind: str
    at_load: bool
    apply: Any  # Callable[[str], str | None]: new name, or None when the rule does not match
    #: Callable[[list[str]], Iterable[object]]: per name, truthy where the rule matches
    #: (the test ``apply`` makes, run over a whole column at C speed)
    hits: Any


#: the longest tensor name a rule may write (published names are under 120 characters)
MAX_NAME = 1024


def check_written_name(source: str, written: str, steps: Sequence[str]) -> None:
    """A name a rule wrote must be a valid safetensors tensor name: not empty, not the
    header's ``__metadata__`` slot, no control characters, at most ``MAX_NAME`` characters.
    Two sources renamed to one name are refused by the planner (``plan.outputs``)."""
    if (
        written
        and written != "__metadata__"
        and len(written) <= MAX_NAME
        and (written.isprintable())
    ):
        return
    shown = repr(written) if len(written) <= 80 else repr(written[:77]) + "..."
    raise InputError(
        f"recipe rule {' > '.join(steps) or '?'} renames tensor {source!r} to {shown}, which "
        "is not a valid tensor name (empty, '__metadata__', a control character or over "
        f"{MAX_NAME} characters); fix the rule"
    )


@dataclass(slots=True)
class RenamedColumn:
    """``RuleSet.rename_all`` of a column of names: per name what ``rename`` would give.

    ``written[k]``, ``engine[k]`` and ``kept[k]`` are ``Renamed``'s fields for ``sources[k]``,
    and ``histories[step_ids[k]]`` its ``steps`` (``histories[0]`` is ``()``): e.g.
    ``step_ids=array([1, 1, 0])``, ``histories=[(), ("hf-layers",)]``.
    """

    written: list[str]
    engine: list[str]
    step_ids: np.ndarray
    histories: list[tuple[str, ...]]
    kept: bytearray

    @property
    def steps(self) -> list[tuple[str, ...]]:
        """Every name's steps (one shared tuple per distinct history)."""
        histories = self.histories
        return [histories[h] for h in self.step_ids.tolist()]


class _Histories:
    """The rule ids each name has matched so far, as one number per name (``ids``) into
    the distinct histories (``histories``), extended rule by rule for many names at once."""

    def __init__(self, n: int) -> None:
        self.ids = np.zeros(n, np.int32)
        self.histories: list[tuple[str, ...]] = [()]
        self._next: dict[tuple[int, str], int] = {}

    def add(self, rows: list[int], rule_id: str) -> None:
        """``rule_id`` appended to the history of each of ``rows``."""
        if not rows:
            return
        at = np.asarray(rows, np.int64)
        now = self.ids[at]
        for h in np.unique(now).tolist():
            key = (h, rule_id)
            k = self._next.get(key)
            if k is None:
                k = self._next[key] = len(self.histories)
                self.histories.append((*self.histories[h], rule_id))
            self.ids[at[now == h]] = k


@dataclass
class RuleSet:
    """A recipe compiled for one checkpoint (``when`` conditions resolved against its config)."""

    recipe: Recipe
    config: dict[str, Any] | None = None
    _drop: list[tuple[str, re.Pattern[str], str]] = field(default_factory=list, init=False)
    _keep: list[tuple[str, re.Pattern[str], str]] = field(default_factory=list, init=False)
    _accept: list[tuple[str, re.Pattern[str]]] = field(default_factory=list, init=False)
    _renames: list[_Rename] = field(default_factory=list, init=False)
    _any_drop: re.Pattern[str] | None = field(default=None, init=False)
    _aliases: list[tuple[str, frozenset[str], str, re.Pattern[str] | None]] = field(
        default_factory=list, init=False
    )

    def __post_init__(self) -> None:
        r = self.recipe.rules
        self._drop = [
            (rule.name or f"drop[{i}]", re.compile(rule.match), rule.reason)
            for i, rule in enumerate(r.drop)
        ]
        self._aliases = [
            (
                rule.name or f"alias[{i}]",
                frozenset(rule.names),
                rule.choose,
                re.compile(rule.skip) if rule.skip else None,
            )
            for i, rule in enumerate(r.alias)
        ]
        if self._drop:
            self._any_drop = re.compile("|".join(f"(?:{p.pattern})" for _, p, _ in self._drop))
        self._keep = [
            (rule.name or f"keep[{i}]", re.compile(rule.match), rule.reason)
            for i, rule in enumerate(r.keep)
        ]
        self._accept = [
            (rule.name or f"accept[{i}]", re.compile(rule.match)) for i, rule in enumerate(r.accept)
        ]
        # the rename kinds in their fixed order, each rule turned into a name -> name function
        kinds = (
            ("regex", r.regex, lambda e: _regex(e.match, e.replace)),
            ("substring", r.substring, lambda e: _substring(e.find, e.replace)),
            ("prefix", r.prefix, lambda e: _prefix(e.from_, e.to)),
            ("suffix", r.suffix, lambda e: _suffix(e.from_, e.to)),
        )
        for kind, entries, make in kinds:
            for i, entry in enumerate(entries):
                if when_matches(entry.when, self.config):
                    apply, hits = make(entry)
                    self._renames.append(
                        _Rename(entry.name or f"{kind}[{i}]", kind, entry.at_load, apply, hits)
                    )

    # -- the pipeline -------------------------------------------------------------------------

    def drop_reason(self, source: str) -> tuple[str, str] | None:
        """(rule id, reason) of the first drop rule matching ``source``."""
        if self._any_drop is None or not self._any_drop.search(source):
            return None
        for rule_id, pattern, reason in self._drop:
            if pattern.search(source):
                return rule_id, reason
        return None

    def drop_hits(self, sources: list[str]) -> list[object] | None:
        """Per name, truthy where some drop rule matches (None: the recipe drops nothing);
        ``drop_reason`` then names the rule."""
        if self._any_drop is None:
            return None
        return list(map(self._any_drop.search, sources))

    def rename(
        self,
        source: str,
        *,
        redirect_to: str | None = None,
        scheme: Scheme | None = None,
        is_scale: bool = False,
        drop_checked: bool = False,
    ) -> Renamed:
        """Run every stage on ``source``.

        ``redirect_to``: the FSE routed-slot name (source naming) when the planner redirects
        this tensor; ``scheme`` / ``is_scale``: what the alias stage needs for a scale tensor;
        ``drop_checked``: the caller already ran ``drop_reason`` (it found nothing).
        """
        dropped = None if drop_checked else self.drop_reason(source)
        if dropped is not None:
            return Renamed(source, None, None, (dropped[0],), reason=dropped[1])
        steps: list[str] = []
        written = source
        if redirect_to is not None:
            written = redirect_to
            steps.append("fse")
        for rule_id, pattern, reason in self._keep:
            if pattern.search(written):
                steps.append(rule_id)
                return Renamed(
                    source,
                    written,
                    written,
                    tuple(steps),
                    reason=reason,
                    kept=True,
                    redirected=redirect_to is not None,
                )
        engine = written
        for rename in self._renames:
            new_engine = rename.apply(engine)
            if rename.at_load:
                if new_engine is not None:
                    engine = new_engine
                    steps.append(rename.rule_id)
                continue
            new_written = rename.apply(written)
            if new_written is not None or new_engine is not None:
                steps.append(rename.rule_id)
            if new_written is not None:
                written = new_written
            if new_engine is not None:
                engine = new_engine
        if is_scale and self._aliases:
            same = engine == written
            spelled = self._alias(written, scheme)
            if spelled is not None:
                steps.append(spelled[0])
                written = spelled[1]
            if same:
                engine = written
            else:
                spelled = self._alias(engine, scheme)
                if spelled is not None:
                    engine = spelled[1]
        if not steps:
            for rule_id, pattern in self._accept:
                if pattern.search(written):
                    steps.append(rule_id)
                    break
        if written is not source:
            check_written_name(source, written, steps)
        return Renamed(source, written, engine, tuple(steps), redirected=redirect_to is not None)

    def rename_all(
        self, sources: list[str], schemes: list[Scheme | None], is_scale: bytes | bytearray
    ) -> RenamedColumn:
        """``rename(sources[k], scheme=schemes[k], is_scale=is_scale[k], drop_checked=True)``
        for every ``k``, stage by stage over the whole column (each rule's test runs over
        the names at C speed; only the names it matches are rewritten). The same answers,
        name for name, as ``rename``: the stages, their order and their rules are the same."""
        n = len(sources)
        written = list(sources)
        steps = _Histories(n)
        kept = bytearray(n)
        live = list(range(n))
        for rule_id, pattern, _ in self._keep:
            hit = list(compress(live, map(pattern.search, map(written.__getitem__, live))))
            if hit:
                steps.add(hit, rule_id)
                for k in hit:
                    kept[k] = 1
                live = [k for k in live if not kept[k]]
        engine = written if not any(r.at_load for r in self._renames) else list(written)
        for rename in self._renames:
            at = list(compress(live, rename.hits(map(engine.__getitem__, live))))
            if rename.at_load:
                for k in at:
                    engine[k] = rename.apply(engine[k])
                steps.add(at, rename.rule_id)
                continue
            if engine is written:
                for k in at:
                    written[k] = rename.apply(written[k])
                steps.add(at, rename.rule_id)
                continue
            wt = list(compress(live, rename.hits(map(written.__getitem__, live))))
            steps.add(sorted(set(at) | set(wt)), rename.rule_id)
            for k in wt:
                written[k] = rename.apply(written[k])
            for k in at:
                engine[k] = rename.apply(engine[k])
        if self._aliases:
            scales = list(compress(live, map(is_scale.__getitem__, live)))
            self._alias_all(scales, written, engine, schemes, steps)
        if self._accept:
            bare = [k for k in live if not steps.ids[k]]
            for rule_id, pattern in self._accept:
                hit = list(compress(bare, map(pattern.search, map(written.__getitem__, bare))))
                if hit:
                    steps.add(hit, rule_id)
                    bare = [k for k in bare if not steps.ids[k]]
        for k in compress(range(n), map(is_not, written, sources)):
            check_written_name(sources[k], written[k], steps.histories[steps.ids[k]])
        return RenamedColumn(written, engine, steps.ids, steps.histories, kept)

    def _alias_all(
        self,
        rows: list[int],
        written: list[str],
        engine: list[str],
        schemes: list[Scheme | None],
        steps: _Histories,
    ) -> None:
        """The alias stage of ``rename_all`` for the scale ``rows``: decided once per (last
        name component, scheme) when no alias rule looks at the whole name."""
        if engine is not written or any(skip is not None for *_, skip in self._aliases):
            for k in rows:  # the general case, name by name as ``rename`` does it
                same = engine[k] == written[k]
                spelled = self._alias(written[k], schemes[k])
                if spelled is not None:
                    steps.add([k], spelled[0])
                    written[k] = spelled[1]
                if same:
                    engine[k] = written[k]
                else:
                    spelled = self._alias(engine[k], schemes[k])
                    if spelled is not None:
                        engine[k] = spelled[1]
            return
        decided: dict[tuple[str, int], tuple[str, str] | None] = {}
        by_rule: dict[str, list[int]] = {}
        for k in rows:
            name = written[k]
            last = name.rpartition(".")[2]
            key = (last, id(schemes[k]))
            if key not in decided:
                spelled = self._alias(name, schemes[k])
                decided[key] = (
                    None if spelled is None else (spelled[0], spelled[1].rpartition(".")[2])
                )
            hit = decided[key]
            if hit is not None:
                written[k] = name[: len(name) - len(last)] + hit[1]
                by_rule.setdefault(hit[0], []).append(k)
        for rule_id, hits in by_rule.items():
            steps.add(hits, rule_id)

    def _alias(self, name: str, scheme: Scheme | None) -> tuple[str, str] | None:
        """(rule id, renamed) when an alias rule changes the last component of ``name``."""
        head, dot, last = name.rpartition(".")
        for rule_id, names, choose, skip in self._aliases:
            if last not in names or (skip is not None and skip.search(name)):
                continue
            wanted = scale_spelling(scheme) if choose == "by_scheme" else choose
            if wanted is None or wanted not in names or wanted == last:
                return None
            return rule_id, f"{head}{dot}{wanted}"
        return None

    def loader_view(self, name: str) -> str:
        """The name the target loader makes of ``name`` when it applies the rename rules
        itself (every regex/substring/prefix/suffix rule, ``at_load`` ones included)."""
        for rename in self._renames:
            new = rename.apply(name)
            if new is not None:
                name = new
        return name


def _regex(match: str, replace: str) -> tuple[Any, Any]:
    pattern = re.compile(match)

    def apply(name: str) -> str | None:
        return pattern.sub(replace, name) if pattern.search(name) else None

    return apply, lambda names: map(pattern.search, names)


def _substring(find: str, replace: str) -> tuple[Any, Any]:
    def apply(name: str) -> str | None:
        return name.replace(find, replace, 1) if find in name else None

    return apply, lambda names: map(str.__contains__, names, repeat(find))


def _prefix(old: str, new: str) -> tuple[Any, Any]:
    def apply(name: str) -> str | None:
        return new + name[len(old) :] if name.startswith(old) else None

    return apply, lambda names: map(str.startswith, names, repeat(old))


def _suffix(old: str, new: str) -> tuple[Any, Any]:
    def apply(name: str) -> str | None:
        return name[: -len(old)] + new if name.endswith(old) else None

    return apply, lambda names: map(str.endswith, names, repeat(old))
