"""The family table's schema and loader (``model/families_data/families.yaml``); each named
rule (MoE layers, shared experts, MTP placement) carries its few lines of evaluation.

Example (one entry of the table, as loaded)::

    spec = load_families()["glm4_moe"]
    spec.keys.n_routed                    # "n_routed_experts"
    spec.moe_layers                       # FirstKDense(rule="first_k_dense",
                                          #             first_k="first_k_dense_replace", freq=None)
    spec.shared                           # CountShared(rule="count", count="n_shared_experts")
    spec.layers.roots, spec.layers.block  # (["model.layers"], "mlp")
    spec.moe_layers.select(ConfigView({"first_k_dense_replace": 1}, family="glm4_moe"), 3, 8)
    # [1, 2]
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from checkpoint_tool.errors import InputError
from checkpoint_tool.model.config_fields import ConfigView
from checkpoint_tool.model.facts import ExpertNaming
from checkpoint_tool.model.naming import choose_root
from checkpoint_tool.yamlio import safe_load

TABLE = Path(__file__).resolve().parent.parent / "families_data" / "families.yaml"


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Keys(_Data):
    """config.json key of each size the family states."""

    n_routed: str
    hidden_size: str = "hidden_size"
    num_hidden_layers: str = "num_hidden_layers"
    moe_intermediate_size: str = "moe_intermediate_size"
    top_k: str = "num_experts_per_tok"
    #: DeepSeek-V4's routed-expert storage ("fp4" | "fp8"); None: the family has none
    expert_dtype: str | None = None


class FirstKDense(_Data):
    """Layer ``i`` is MoE when ``i >= config[first_k]`` and ``i % config[freq] == 0``."""

    rule: Literal["first_k_dense"]
    first_k: str | None = None
    freq: str | None = None
    #: ``config[first_k]`` when config.json omits it (the model config class's default)
    first_k_default: int = 0

    def select(self, cfg: ConfigView, n_layers: int, n_routed: int) -> list[int]:
        first_k = cfg.opt_int(self.first_k, self.first_k_default) if self.first_k else 0
        freq = cfg.opt_int(self.freq, 1) if self.freq else 1
        if freq <= 0:
            raise InputError(f"config.json: {self.freq} must be >= 1, got {freq}; fix config.json")
        return [i for i in range(n_layers) if i >= first_k and i % freq == 0]


class SparseStep(_Data):
    """Layer ``i`` is MoE when ``i not in config[mlp_only]``, ``n_routed > 0`` and
    ``(i + 1) % config[step] == 0``."""

    rule: Literal["sparse_step"]
    step: str
    mlp_only: str | None = None

    def select(self, cfg: ConfigView, n_layers: int, n_routed: int) -> list[int]:
        step = cfg.opt_int(self.step, 1) or 1
        dense = set(cfg.int_list(self.mlp_only)) if self.mlp_only else set()
        return [
            i for i in range(n_layers) if i not in dense and n_routed > 0 and (i + 1) % step == 0
        ]


class LayerList(_Data):
    """Layer ``i`` is MoE by a per-layer list ``config[key]``: entry ``i`` equals ``moe_value``
    (None: any non-zero entry). A list shorter than the model repeats its last entry when
    ``pad_with_last`` (else it is an error). With no list in config.json, ``absent`` decides
    (another rule), else every layer from ``absent_first_dense`` on (the list the model's
    config class defaults to)."""

    rule: Literal["layer_list"]
    key: str
    moe_value: int | str | None = None
    pad_with_last: bool = False
    absent: FirstKDense | None = None
    absent_first_dense: int = 0

    def select(self, cfg: ConfigView, n_layers: int, n_routed: int) -> list[int]:
        flags = cfg.get(self.key)
        if flags is None:
            if self.absent is not None:
                return self.absent.select(cfg, n_layers, n_routed)
            return list(range(self.absent_first_dense, n_layers))
        if not isinstance(flags, list) or any(isinstance(f, (dict, list)) for f in flags):
            raise InputError(f"config.json: {self.key!r} must be a list per layer, got {flags!r}")
        if len(flags) < n_layers:
            if not (self.pad_with_last and flags):
                raise InputError(
                    f"config.json: {self.key!r} lists {len(flags)} layers but num_hidden_layers "
                    f"is {n_layers}; fix config.json"
                )
            flags = flags + [flags[-1]] * (n_layers - len(flags))
        if self.moe_value is None:
            return [i for i in range(n_layers) if flags[i] not in (0, None, False)]
        return [i for i in range(n_layers) if flags[i] == self.moe_value]


class IndexRange(_Data):
    """Layer ``i`` is MoE when ``config[start] <= i <= config[end]`` and ``(i + 1) %
    config[interval] == 0`` (absent: 0, the last layer, 1), and ``n_routed > 0``
    (ERNIE-4.5: ``moe_layer_start_index`` / ``moe_layer_end_index`` / ``moe_layer_interval``)."""

    rule: Literal["index_range"]
    start: str
    end: str
    interval: str

    def select(self, cfg: ConfigView, n_layers: int, n_routed: int) -> list[int]:
        start = cfg.opt_int(self.start, 0)
        end = cfg.opt_int(self.end, n_layers - 1)
        interval = cfg.opt_int(self.interval, 1)
        if interval <= 0:
            raise InputError(
                f"config.json: {self.interval} must be >= 1, got {interval}; fix config.json"
            )
        return [
            i
            for i in range(n_layers)
            if n_routed > 0 and start <= i <= end and (i + 1) % interval == 0
        ]


class EveryLayer(_Data):
    """Every decoder layer is MoE."""

    rule: Literal["every_layer"]

    def select(self, cfg: ConfigView, n_layers: int, n_routed: int) -> list[int]:
        return list(range(n_layers))


MoeLayerRule = Annotated[
    FirstKDense | SparseStep | LayerList | IndexRange | EveryLayer, Field(discriminator="rule")
]


class CountShared(_Data):
    """``config[count]`` shared experts (absent: ``default``, the model config class's
    default), one MLP ``count * moe_intermediate_size`` wide."""

    rule: Literal["count"]
    count: str
    default: int = 0

    def sizes(self, cfg: ConfigView, moe_i: int) -> tuple[int, int]:
        """(number of shared experts, total width)."""
        n_shared = cfg.opt_int(self.count, self.default)
        return n_shared, n_shared * moe_i


class WidthShared(_Data):
    """One shared expert when ``config[width] > 0``, that wide."""

    rule: Literal["width"]
    width: str

    def sizes(self, cfg: ConfigView, moe_i: int) -> tuple[int, int]:
        """(number of shared experts, total width)."""
        width = cfg.opt_int(self.width, 0)
        return (1 if width > 0 else 0), width


class FixedShared(_Data):
    """``count`` shared experts whatever config.json says (Llama-4: always one), one MLP
    ``count * moe_intermediate_size`` wide."""

    rule: Literal["fixed"]
    count: int = Field(ge=0)

    def sizes(self, cfg: ConfigView, moe_i: int) -> tuple[int, int]:
        """(number of shared experts, total width)."""
        return self.count, self.count * moe_i


SharedRule = Annotated[CountShared | WidthShared | FixedShared, Field(discriminator="rule")]


class RoutingDefaults(_Data):
    """How a model type routes when config.json omits the routing keys (the values vLLM's
    model class or the config class assume)."""

    scoring_func: Literal["softmax", "sigmoid", "sqrtsoftplus"]
    topk_method: Literal["greedy", "group_limited_greedy", "noaux_tc"]
    #: the config.json key of the top-k where the model reads its own (ERNIE-4.5: moe_k)
    top_k: str | None = None
    #: whether the model renormalises the chosen weights when config.json has no
    #: norm_topk_prob (ERNIE-4.5: FusedMoE(renormalize=True); gpt-oss: MLPBlock passes
    #: renormalize=True); None: the key's default, False
    norm_topk_prob: bool | None = None


class Fse(_Data):
    """Whether the family's vLLM model can fuse its shared experts at all (``supported``;
    the model's own words why not in ``reason``); ``unsupported_model_types``: model types
    of the family whose vLLM model never fuses although the others do, each with its reason
    (``{qwen2_moe: "qwen2_moe.py Qwen2MoeSparseMoeBlock ..."}``)."""

    supported: bool = True
    reason: str = ""
    unsupported_model_types: dict[str, str] = Field(default_factory=dict)

    def unsupported(self, model_types: set[str]) -> str | None:
        """Why a model of ``model_types`` never fuses its shared experts, or None."""
        if not self.supported:
            return self.reason
        for model_type in sorted(model_types):
            if model_type in self.unsupported_model_types:
                return self.unsupported_model_types[model_type]
        return None


class Layers(_Data):
    """Where the decoder's MoE blocks live: ``{root}.{i}.{block}``."""

    roots: list[str] = Field(min_length=1)
    #: the candidates for a multimodal wrapper (None: ``roots``)
    wrapper_roots: list[str] | None = None
    block: str


class MtpCount(_Data):
    """The MTP layer count of one model type: ``config[key]``, else the count vLLM's drafter
    assumes when config.json has none (``default``)."""

    key: str | None = None
    default: int = 0


class Mtp(_Data):
    """MTP layers: how many (``count`` key, ``default``; ``by_model_type`` overrides both per
    config.json ``model_type``) and where (see the table's header)."""

    count: str | None = None
    #: the count vLLM's drafter assumes when config.json has no ``count`` key
    default: int = 0
    by_model_type: dict[str, MtpCount] = Field(default_factory=dict)
    roots: list[str] | dict[str, list[str]] | None = None

    def count_of(self, cfg: ConfigView, model_types: Collection[str]) -> tuple[int, bool]:
        """(number of MTP layers, whether config.json states it) for a model of
        ``model_types`` (every ``model_type`` of config.json's parts)."""
        rule = next(
            (self.by_model_type[t] for t in sorted(model_types) if t in self.by_model_type),
            MtpCount(key=self.count, default=self.default),
        )
        value = cfg.opt_int(rule.key, -1) if rule.key else -1
        return (value, True) if value >= 0 else (rule.default, False)

    def prefixes(
        self,
        n_mtp: int,
        root: str,
        n_layers: int,
        block: str,
        names: Collection[str] | None,
    ) -> list[tuple[int, str]]:
        """``(global index, prefix)`` of each of ``n_mtp`` MTP layers."""
        if self.roots is None:
            return [(n_layers + k, f"{root}.{n_layers + k}.{block}") for k in range(n_mtp)]
        candidates = self.roots[root] if isinstance(self.roots, dict) else self.roots
        mtp_root = choose_root(candidates, names)
        return [(n_layers + k, f"{mtp_root}.{k}.{block}") for k in range(n_mtp)]


class FamilySpec(_Data):
    """One row of the family table."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    model_types: frozenset[str]
    architecture_prefixes: tuple[str, ...]
    keys: Keys
    moe_layers: MoeLayerRule
    shared: SharedRule
    layers: Layers
    mtp: Mtp = Field(default_factory=Mtp)
    naming: ExpertNaming = Field(default_factory=ExpertNaming)
    #: model_type -> naming fields that differ from ``naming`` for that model type (Qwen3-VL-MoE:
    #: 3-D fused experts in ``[in, out]`` order, where the family's other models store them
    #: per expert)
    naming_by_model_type: dict[str, dict[str, Any]] = Field(default_factory=dict)
    fse: Fse = Field(default_factory=Fse)
    #: model_type -> routing defaults (model types of this family's engine code, listed
    #: where config.json may omit scoring_func / topk_method)
    routing: dict[str, RoutingDefaults] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _mtp_roots_per_decoder_root(self) -> FamilySpec:
        if isinstance(self.mtp.roots, dict):
            decoder = {*self.layers.roots, *(self.layers.wrapper_roots or ())}
            if decoder - set(self.mtp.roots):
                raise ValueError(f"mtp.roots must name every decoder root of {sorted(decoder)}")
        return self

    def decoder_roots(self, wrapper: bool) -> list[str]:
        """Candidate decoder roots: ``wrapper_roots`` for a multimodal wrapper."""
        return (self.layers.wrapper_roots if wrapper else None) or self.layers.roots

    @field_validator("name")
    @classmethod
    def _not_generic(cls, value: str) -> str:
        if value == "generic":
            raise ValueError("'generic' is the tensor-name detector, not a row of the table")
        return value

    @field_validator("naming", mode="before")
    @classmethod
    def _known_naming_fields(cls, value: Any) -> Any:
        unknown = set(value) - set(ExpertNaming.model_fields) if isinstance(value, dict) else ()
        if unknown:
            raise ValueError(f"unknown naming field(s) {sorted(unknown)}")
        return value

    @field_validator("naming_by_model_type")
    @classmethod
    def _known_override_fields(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for fields in value.values():
            cls._known_naming_fields(fields)
            ExpertNaming.model_validate(fields)
        return value

    def naming_for(self, model_types: Collection[str | None]) -> ExpertNaming:
        """The default naming of a model of ``model_types``: ``naming`` with the first matching
        ``naming_by_model_type`` entry (in sorted model-type order) applied."""
        for model_type in sorted(t for t in model_types if t):
            if model_type in self.naming_by_model_type:
                return ExpertNaming.model_validate(
                    {**self.naming.model_dump(), **self.naming_by_model_type[model_type]}
                )
        return self.naming


@lru_cache(maxsize=4)
def load_families(path: Path = TABLE) -> dict[str, FamilySpec]:
    """family name -> spec, in the order ``family_of`` tries them (the file's)."""
    try:
        data = safe_load(path.read_text())
        rows = list(data.items())
    except (OSError, AttributeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a valid family table ({first}); reinstall ckpt") from None
    specs = []
    for name, row in rows:
        try:
            specs.append(FamilySpec.model_validate({**(row or {}), "name": name}))
        except (TypeError, ValidationError) as exc:
            problem = str(exc).splitlines()[0]
            if isinstance(exc, ValidationError):
                err = exc.errors()[0]
                problem = f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            raise InputError(
                f"{path}: not a valid family table ({name}: {problem}); reinstall ckpt"
            ) from None
    return {spec.name: spec for spec in specs}
