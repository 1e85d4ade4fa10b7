"""The recipe file format: pydantic models for ``recipes/*.yaml`` (JSON Schema in ``docs/``).

A recipe names a model family and the rules that turn the checkpoint's tensor names into the
names the target runtime loads. Rules are grouped by kind; the kinds run in one fixed order
(``RULE_ORDER``, documented in ``docs/recipes.md``), rules of one kind in file order.

Example (YAML)::

    name: deepseek-v4-amd
    family: deepseek_v4
    match: {model_type: [deepseek_v4]}
    loader_reapplies_rules: true
    rules:
      drop:   [{match: '^vision\\.', reason: "vision tower, not part of the text model"}]
      keep:   [{match: '^mtp\\.', reason: "loaded by the MTP drafter under its own names"}]
      regex:  [{match: '(\\.experts\\.\\d+\\.w[123])\\.scale$', replace: '\\1.weight_scale'}]
      substring: [{find: .shared_experts.w2, replace: .shared_experts.down_proj}]
      prefix: [{from: layers., to: model.layers.}]
      suffix: [{from: head.weight, to: lm_head.weight, at_load: true}]
      alias:  [{names: [weight_scale, weight_scale_inv], choose: by_scheme}]
    fse: {supported: true}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from checkpoint_tool.errors import InputError
from checkpoint_tool.safe_regex import check_regex

#: the fixed order in which rule kinds apply (``fse`` is the shared-expert redirection, whose
#: names come from the model facts and whose per-layer decision comes from the policy)
RULE_ORDER: tuple[str, ...] = (
    "drop",
    "fse",
    "keep",
    "regex",
    "substring",
    "prefix",
    "suffix",
    "alias",
    "accept",
)

#: config.json value(s) a rule requires, e.g. ``{"expert_dtype": "fp4"}``; a list means any of
When = dict[str, Any]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _check_regex(value: str) -> str:
    """A valid regex that runs in bounded time (``safe_regex``)."""
    try:
        check_regex(value, "rule match")
    except InputError as exc:
        raise ValueError(exc.message) from None
    return value


class DropRule(_Strict):
    """Remove matching tensors from the output; every drop is reported with its reason."""

    match: str = Field(description="Python regex, searched in the source name.")
    reason: str = Field(min_length=1, description="Why these tensors are not written.")
    name: str | None = Field(default=None, description="Rule id for reports.")

    _v = field_validator("match")(_check_regex)


class KeepRule(_Strict):
    """Write matching tensors under their source name; no later rename rule applies."""

    match: str = Field(description="Python regex, searched in the (possibly redirected) name.")
    reason: str = Field(min_length=1, description="Why the name must stay as it is.")
    name: str | None = None

    _v = field_validator("match")(_check_regex)


class AcceptRule(_Strict):
    """Names the recipe knows that need no rename (they count as matched, not unmatched)."""

    match: str = Field(description="Python regex, searched in the final name.")
    reason: str = Field(min_length=1, description="Why these names are already right.")
    name: str | None = None

    _v = field_validator("match")(_check_regex)


class _RenameRule(_Strict):
    #: applied by the engine at load time only: ckpt computes it for the engine's view of the
    #: names but leaves the written name alone (needed when the rule is not idempotent, e.g. the
    #: suffix ``head.weight -> lm_head.weight`` would turn ``lm_head.weight`` into
    #: ``lm_lm_head.weight`` when the loader applies it a second time)
    at_load: bool = False
    when: When | None = Field(
        default=None, description="Only when config.json has these values (list = any of)."
    )
    name: str | None = None
    note: str | None = Field(default=None, description="Free text, e.g. the upstream source.")


class RegexRule(_RenameRule):
    """``re.sub(match, replace, name)`` when ``re.search(match, name)`` (``\\1`` groups)."""

    match: str
    replace: str

    _v = field_validator("match")(_check_regex)


class SubstringRule(_RenameRule):
    """Replace the first occurrence of ``find`` with ``replace``."""

    find: str = Field(min_length=1)
    replace: str


class PrefixRule(_RenameRule):
    """Replace a leading ``from`` with ``to``."""

    from_: str = Field(alias="from", min_length=1)
    to: str


class SuffixRule(_RenameRule):
    """Replace a trailing ``from`` with ``to`` (the last occurrence)."""

    from_: str = Field(alias="from", min_length=1)
    to: str


class AliasRule(_Strict):
    """Scale-name aliases: the last name component of a scale tensor is set to the spelling
    the target loader registers for the tensor's quantization scheme.

    ``by_scheme``: block-FP8 under Fp8Config naming (DeepSeek native, DeepSeek-V4 block-128)
    -> ``weight_scale_inv``; Quark, MX (MXFP4 / MXFP8), NVFP4 and per-tensor/channel FP8 ->
    ``weight_scale``. A fixed name forces that spelling for every scale in the group.
    """

    names: list[str] = Field(min_length=2, description="Interchangeable final components.")
    choose: str = Field(default="by_scheme", description="'by_scheme' or one of `names`.")
    skip: str | None = Field(
        default=None, description="Regex: names (after renames) this alias leaves alone."
    )
    name: str | None = None

    _v = field_validator("skip")(lambda v: v if v is None else _check_regex(v))


class Rules(_Strict):
    """Rule lists by kind. The kinds always apply in ``RULE_ORDER``."""

    drop: list[DropRule] = Field(default_factory=list)
    keep: list[KeepRule] = Field(default_factory=list)
    regex: list[RegexRule] = Field(default_factory=list)
    substring: list[SubstringRule] = Field(default_factory=list)
    prefix: list[PrefixRule] = Field(default_factory=list)
    suffix: list[SuffixRule] = Field(default_factory=list)
    alias: list[AliasRule] = Field(default_factory=list)
    accept: list[AcceptRule] = Field(default_factory=list)


class FseSupport(_Strict):
    """Whether the target loader can hold shared experts in routed slots ``n_routed + j``."""

    supported: bool = True
    reason: str = Field(default="", description="Why not, when unsupported.")


class Match(_Strict):
    """How ``auto_recipe`` recognises a checkpoint from its config.json (any field matching)."""

    model_type: list[str] = Field(default_factory=list)
    architectures: list[str] = Field(default_factory=list)


class Recipe(_Strict):
    """A named, ordered set of rename rules for one model family and target runtime."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    #: model family the rules are written for: a row of the family table
    #: (``model/families_data/families.yaml``) or "generic"
    family: str = "generic"
    #: the runtime whose loader reads the output, e.g. "vLLM 0.33"
    target: str = ""
    match: Match = Field(default_factory=Match)
    #: the target loader applies these same rules again to the names it reads (a vLLM
    #: ``hf_to_vllm_mapper``): the planner then checks that every written name is a fixed
    #: point, i.e. the loader ends up with the same name as from the source
    loader_reapplies_rules: bool = False
    rules: Rules = Field(default_factory=Rules)
    fse: FseSupport = Field(default_factory=FseSupport)
    #: where the recipe came from (bundled name or file path); set by the loader
    origin: str = Field(default="", exclude=True)

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str) -> str:
        from checkpoint_tool.model.families import FAMILIES

        if value != "generic" and value not in FAMILIES:
            raise ValueError(f"unknown family {value!r}; known: {sorted(FAMILIES)} or generic")
        return value


def recipe_json_schema() -> dict[str, Any]:
    """The JSON Schema of a recipe file (``ckpt recipes schema``, ``docs/schemas/``)."""
    schema = Recipe.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ckpt recipe"
    schema["properties"].pop("origin", None)
    return schema
