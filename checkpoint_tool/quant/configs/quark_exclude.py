"""A Quark ``exclude`` list indexed once, so a lookup costs the same for 10 or 10^5 entries.

Quark writes every module it left unquantized by exact name: amd/DeepSeek-R1-0528-MXFP4
lists 1,084 (its attention, the MTP layer 61, ``lm_head``). Walking the list for each of R1's
~47k modules, by both matchers, took ~50 s of ``inspect``. The index answers the same
question, **the first entry in list order that matches**, from:

- ``exact``: entry -> its first position (plain names, neither ``re:`` nor a glob);
- ``children``: ``X.experts`` -> first position of an entry naming a module under it (vLLM
  excludes a FusedMoE layer when any entry names one of its experts);
- ``patterns``: the ``re:`` entries and (for Quark's matcher) the globs, in list order, tried
  one by one only when one combined pattern says some of them match.

Example::

    idx = ExcludeIndex(["lm_head", "re:.*self_attn.*", "model.layers.61.mlp.experts.0.up_proj"])
    idx.vllm_first("model.layers.61.mlp.experts", moe=True)
    # ('model.layers.61.mlp.experts.0.up_proj', 'child')
    idx.vllm_first("model.layers.3.self_attn.o_proj", moe=False)  # ('re:.*self_attn.*', 're.match')
    idx.producer_first("lm_head")                                 # ('lm_head', 'exact')
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

_GLOB_CHARS = frozenset("*?[")


class _Ordered:
    """Patterns with their list positions; ``first(name)`` is the earliest that matches."""

    def __init__(self, items: list[tuple[int, str, re.Pattern[str]]]) -> None:
        self.items = items
        self.any: re.Pattern[str] | None = None
        if len(items) > 1:
            try:  # one pass says whether any matches (inline flags or groups may not combine)
                self.any = re.compile("|".join(f"(?:{p.pattern})" for _, _, p in items))
            except re.error:
                self.any = None

    def first(self, name: str, before: int) -> tuple[int, str] | None:
        if not self.items or (self.any is not None and self.any.match(name) is None):
            return None
        for pos, entry, pattern in self.items:
            if pos >= before:
                return None
            if pattern.match(name):
                return pos, entry
        return None


class ExcludeIndex:
    """``exclude`` indexed for both matchers (see the module doc)."""

    def __init__(self, entries: Sequence[str]) -> None:
        self.exact: dict[str, int] = {}
        self.children: dict[str, int] = {}
        regexes: list[tuple[int, str, re.Pattern[str]]] = []
        both: list[tuple[int, str, re.Pattern[str]]] = []
        for pos, entry in enumerate(entries):
            if entry.startswith("re:"):
                item = (pos, entry, re.compile(entry[3:]))
                regexes.append(item)
                both.append(item)
                continue
            self.exact.setdefault(entry, pos)
            if _GLOB_CHARS.intersection(entry):
                both.append((pos, entry, re.compile(fnmatch.translate(entry))))
            parts = entry.split(".")
            for k in range(1, len(parts)):
                if parts[k - 1] == "experts":
                    self.children.setdefault(".".join(parts[:k]), pos)
        self.entries = list(entries)
        self._vllm = _Ordered(regexes)
        self._producer = _Ordered(both)

    def vllm_first(self, layer: str, moe: bool) -> tuple[str, str] | None:
        """vLLM's ``should_ignore_layer``: ``(entry, "exact" | "re.match" | "child")`` of the
        first entry equal to ``layer``, ``re.match``-ing it, or (``moe``) naming a child of it."""
        best, how = len(self.entries), ""
        pos = self.exact.get(layer)
        if pos is not None:
            best, how = pos, "exact"
        if moe:
            pos = self.children.get(layer)
            if pos is not None and pos < best:
                best, how = pos, "child"
        hit = self._vllm.first(layer, best)
        if hit is not None:
            best, how = hit[0], "re.match"
        return (self.entries[best], how) if how else None

    def producer_first(self, module: str) -> tuple[str, str] | None:
        """Quark's matcher: ``(module, "exact")`` when listed, else the first ``re:`` entry
        (``re.match``) or glob (``fnmatch``) matching it, in list order."""
        if module in self.exact:
            return module, "exact"
        hit = self._producer.first(module, len(self.entries))
        if hit is None:
            return None
        entry = hit[1]
        return entry, "re.match" if entry.startswith("re:") else "fnmatch"
