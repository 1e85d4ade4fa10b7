"""State-dict keys: which of a tensor's names the engine's sharded-state loader uses.

``nn.Module.state_dict()`` lists a tensor once per path its module is registered under;
vLLM's ``ShardedStateLoader._filter_subtensors`` then keeps the *smallest* key of tensors that
share storage. The spec's ``aliases`` list those extra paths; ``KeyResolver.key`` applies the
rule.

Example (vLLM 0.33, DeepSeek-V3)::

    keys = KeyResolver(spec)
    keys.key("model.layers.3.self_attn.o_proj", "weight")
    # 'model.layers.3.self_attn.mla_attn.o_proj.weight'  ("mla_attn" < "o_proj")
    keys.key("model.layers.3.mlp.gate", "e_score_correction_bias")
    # 'model.layers.3.mlp.experts.gate.e_score_correction_bias'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checkpoint_tool.targets.spec import TargetSpec

_FIELD = re.compile(r"\\\{(\w+)\\\}")


def template_regex(template: str, *, prefix: bool = False) -> re.Pattern[str]:
    """``model.layers.{L}.mlp`` -> a regex with named groups (``{L}`` digits, others words);
    ``prefix``: also match names below it (the rest in group ``rest``)."""

    def group(m: re.Match[str]) -> str:
        name = m.group(1)
        return rf"(?P<{name}>\d+)" if name == "L" else rf"(?P<{name}>[A-Za-z0-9_]+)"

    tail = r"(?P<rest>\..+)?" if prefix else ""
    return re.compile("^" + _FIELD.sub(group, re.escape(template)) + tail + "$")


@dataclass(frozen=True)
class _Alias:
    pattern: re.Pattern[str]
    also: tuple[str, ...]
    is_param: bool


class KeyResolver:
    """Smallest-alias state-dict keys for one target spec."""

    def __init__(self, spec: TargetSpec) -> None:
        aliases: list[_Alias] = []
        for a in spec.aliases:
            base = a.param if a.param is not None else a.module
            assert base is not None, "an alias names a module or a param"
            each: list[str | None] = [*a.each] if a.each else [None]
            for m in each:
                source = base if m is None else base.replace("{m}", m)
                also = tuple(x if m is None else x.replace("{m}", m) for x in a.also)
                is_param = a.param is not None
                aliases.append(_Alias(template_regex(source, prefix=not is_param), also, is_param))
        self._aliases = aliases

    def _expand(self, name: str, is_param: bool) -> set[str]:
        """``name`` and every alias of it (module aliases also rename submodules)."""
        out, todo = {name}, [name]
        while todo:
            current = todo.pop()
            for a in self._aliases:
                if a.is_param != is_param:
                    continue
                m = a.pattern.match(current)
                if m is None:
                    continue
                fields = {k: v for k, v in m.groupdict().items() if k != "rest"}
                rest = m.groupdict().get("rest") or ""
                for x in a.also:
                    alias = x.format(**fields) + rest
                    if alias not in out:
                        out.add(alias)
                        todo.append(alias)
        return out

    def names(self, module: str, param: str) -> set[str]:
        """Every state-dict name of parameter ``param`` of ``module``."""
        modules = self._expand(module, is_param=False)
        full = {f"{m}.{param}" for m in modules}
        for name in list(full):
            full |= self._expand(name, is_param=True)
        return full

    def key(self, module: str, param: str) -> str:
        """The key the loader keeps: the smallest of ``names``."""
        return min(self.names(module, param))
