"""What every engine rule check may look at, computed once and lazily.

``EngineContext`` holds the catalog (headers only), the raw ``quantization_config`` dict (as
the engine reads it, before ckpt's pydantic models normalise it), the policy decision (its
parsed config, resolved schemes and model facts), the target and the serving options. Without
a decision (ckpt cannot decide a policy for the checkpoint, the engine may still try) the
config is parsed here and ``scheme_of(name)`` resolves one tensor at a time (cached).
``vllm_layers`` is computed on first use.

Example::

    ctx = EngineContext.build(catalog, decide_policy(catalog, tp=2), target, ServeOptions(tp=2))
    ctx.is_quark, ctx.moe_layer_prefixes()[:1]
    # (True, ['model.layers.1.mlp.experts'])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import CkptError
from checkpoint_tool.model import ModelFacts, model_facts
from checkpoint_tool.quant.configs import QuarkConfig
from checkpoint_tool.quant.configs.names import expert_parts, non_linear_reason
from checkpoint_tool.quant.resolve import load_quant_config, resolve_tensor
from checkpoint_tool.quant.scheme import Scheme

from .model import Target

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.policy.decision import PolicyDecision
    from checkpoint_tool.quant.configs import QuantConfig


@dataclass(frozen=True)
class ServeOptions:
    """How the engine is asked to run the checkpoint."""

    tp: int = 1
    moe_backend: str | None = None
    ep: bool = False
    eplb: bool = False
    all2all: str | None = None


@dataclass
class EngineContext:
    catalog: Catalog
    target: Target
    options: ServeOptions
    decision: PolicyDecision | None = None
    config: dict[str, Any] = field(default_factory=dict)
    #: quantization_config exactly as config.json holds it (None when absent)
    raw_qc: dict[str, Any] | None = None
    qconfig: QuantConfig | None = None
    #: why ckpt could not parse the quantization config (the engine may still try)
    qconfig_error: str | None = None
    #: tensor -> scheme, resolved here one at a time when there is no decision
    schemes: dict[str, Scheme | None] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        catalog: Catalog,
        decision: PolicyDecision | None,
        target: Target,
        options: ServeOptions,
    ) -> EngineContext:
        config = catalog.config or {}
        raw = config.get("quantization_config") if isinstance(config, dict) else None
        ctx = cls(
            catalog=catalog,
            target=target,
            options=options,
            decision=decision,
            config=config if isinstance(config, dict) else {},
            raw_qc=raw if isinstance(raw, dict) else None,
        )
        if decision is not None:
            ctx.qconfig = decision.resolved.qconfig
            return ctx
        try:
            ctx.qconfig = load_quant_config(ctx.config, catalog.hf_quant_config)
        except CkptError as exc:
            ctx.qconfig_error = exc.message
        return ctx

    # -- derived facts -----------------------------------------------------------------------

    @property
    def is_quark(self) -> bool:
        return isinstance(self.qconfig, QuarkConfig)

    @property
    def quark(self) -> QuarkConfig:
        """The parsed Quark config, for the Quark-only rules (they run when ``is_quark``)."""
        if not isinstance(self.qconfig, QuarkConfig):
            raise TypeError("a Quark rule ran on a checkpoint without a Quark config")
        return self.qconfig

    def scheme_of(self, name: str) -> Scheme | None:
        """Scheme vLLM resolves for tensor ``name`` (None: no such tensor or no config): the
        decision's, else resolved here one tensor at a time (``resolve_tensor``)."""
        if self.decision is not None:
            resolved = self.decision.resolved.tensors.get(name)
            return resolved.scheme if resolved is not None else None
        if name in self.schemes:
            return self.schemes[name]
        entry = self.catalog.tensors.get(name)
        scheme = None
        if entry is not None and self.qconfig is not None:
            scheme = resolve_tensor(self.qconfig, name, dtype=entry.dtype, shape=entry.shape).scheme
        self.schemes[name] = scheme
        return scheme

    @functools.cached_property
    def facts(self) -> ModelFacts | None:
        """The decision's model facts; without a decision, from config.json (None when it
        does not describe the model)."""
        if self.decision is not None:
            return self.decision.facts
        try:
            return model_facts(self.config, self.catalog.tensors)
        except CkptError:
            return None

    @functools.cached_property
    def linear_modules(self) -> list[str]:
        """Checkpoint modules holding a quantizable ``.weight`` (sorted)."""
        out = set()
        for name in self.catalog.tensors:
            if not name.endswith(".weight"):
                continue
            module = name[: -len(".weight")]
            if non_linear_reason(module) is None:
                out.add(module)
        return sorted(out)

    @functools.cached_property
    def vllm_layers(self) -> dict[str, list[str]]:
        """vLLM layer -> the checkpoint modules it loads: routed experts of a layer go to one
        FusedMoE layer (``X.experts``), every other module is its own layer here (packed
        shards are checked by ``resolve_catalog``)."""
        out: dict[str, list[str]] = {}
        for module in self.linear_modules:
            parts = expert_parts(module)
            key = parts[0] if parts else module
            out.setdefault(key, []).append(module)
        return out

    def moe_layer_index(self, prefix: str) -> int | None:
        """``model.layers.3.mlp.experts`` -> 3 (the MoE layer facts' index), else None."""
        facts = self.facts
        if facts is None:
            return None
        for m in facts.moe_layers:
            if m.routed_prefix == prefix:
                return m.layer
        return None

    def is_moe_layer(self, layer: str) -> bool:
        """Is this vLLM layer a FusedMoE layer (routed experts)?"""
        modules = self.vllm_layers.get(layer) or []
        return bool(modules) and expert_parts(modules[0]) is not None
