"""What a user asked to requantize, checked against the model: ``--requantize-shared mxfp4
--requantize-layers 10-20|all|auto [--max-error 0.01]``.

``RequantRequest`` is the request as given (pydantic: the CLI edge); ``candidate_layers`` the
MoE layers that have a shared expert; ``select_layers`` the layers to requantize, refusing
layers that do not exist or have no shared expert, and (with a budget) layers whose measured
error is above it. Pure: the errors are given (``requant.error``).

Example::

    req = RequantRequest.parse("mxfp4", "10-12", None)
    select_layers(req, facts, errors=None)            # [10, 11, 12]
    req = RequantRequest.parse("mxfp4", "auto", 0.01)
    select_layers(req, facts, errors={1: 0.004, 2: 0.02})   # [1]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel

from checkpoint_tool.errors import UsageError

if TYPE_CHECKING:
    from checkpoint_tool.model import ModelFacts

#: target schemes requantization writes
SCHEMES = ("mxfp4",)


class RequantRequest(BaseModel):
    """``scheme``: the target (``mxfp4``); ``layers``: ``"all"``, ``"auto"`` or layer numbers;
    ``max_error``: the budget on the MoE layer output's relative error (None: no budget)."""

    scheme: str = "mxfp4"
    layers: list[int] | str = "all"
    max_error: float | None = None

    @classmethod
    def parse(
        cls, scheme: str | None, layers: str | None, max_error: float | None
    ) -> RequantRequest | None:
        """The CLI's three options -> a request (None when ``--requantize-shared`` is absent)."""
        if scheme is None:
            if layers is not None or max_error is not None:
                raise UsageError("--requantize-layers / --max-error need --requantize-shared mxfp4")
            return None
        if scheme.strip().lower() not in SCHEMES:
            raise UsageError(
                f"--requantize-shared {scheme!r}: unknown scheme; requantization writes "
                f"{', '.join(SCHEMES)}"
            )
        if max_error is not None and not max_error > 0:
            raise UsageError(f"--max-error {max_error}: give a relative error above 0, e.g. 0.01")
        spec = (layers or "all").strip().lower()
        if spec == "auto" and max_error is None:
            raise UsageError("--requantize-layers auto needs --max-error, e.g. --max-error 0.01")
        if spec in ("all", "auto"):
            return cls(scheme=scheme.strip().lower(), layers=spec, max_error=max_error)
        return cls(scheme=scheme.strip().lower(), layers=_numbers(spec), max_error=max_error)

    def needs_errors(self) -> bool:
        return self.max_error is not None


def _numbers(text: str) -> list[int]:
    out: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi or lo)
            if b < a:
                raise ValueError
            out.update(range(a, b + 1))
    except ValueError:
        raise UsageError(
            f"--requantize-layers {text!r}: write all, auto, or layer numbers like 10-20 or 3,5"
        ) from None
    if not out:
        raise UsageError(f"--requantize-layers {text!r}: no layer given")
    return sorted(out)


def candidate_layers(facts: ModelFacts) -> list[int]:
    """MoE layers with a shared expert, in order."""
    return [lf.layer for lf in facts.moe_layers if lf.shared_prefix is not None]


def select_layers(
    request: RequantRequest,
    facts: ModelFacts,
    errors: Mapping[int, float] | None,
    *,
    where: str = "",
) -> list[int]:
    """The layers to requantize (see the module doc); ``errors``: layer -> measured MoE output
    relative error, needed when ``request.max_error`` is set."""
    moe = {lf.layer: lf for lf in facts.moe_layers}
    cands = candidate_layers(facts)
    at = f"{where}: " if where else ""
    if not cands:
        raise UsageError(f"{at}no MoE layer has a shared expert: nothing to requantize")
    if isinstance(request.layers, list):
        for n in request.layers:
            if n not in moe:
                raise UsageError(
                    f"{at}--requantize-layers: layer {n} is not an MoE layer of this model "
                    f"(MoE layers: {_ranges(sorted(moe))})"
                )
            if moe[n].shared_prefix is None:
                raise UsageError(f"{at}--requantize-layers: MoE layer {n} has no shared expert")
        chosen = list(request.layers)
    else:
        chosen = list(cands)
    if request.max_error is None:
        return chosen
    assert errors is not None
    budget = request.max_error
    if request.layers == "auto":
        picked = [n for n in chosen if errors[n] <= budget]
        if not picked:
            best = min(chosen, key=lambda n: errors[n])
            raise UsageError(
                f"{at}--max-error {budget}: no layer meets the budget; the cheapest is layer "
                f"{best} (MoE output error {errors[best]:.4g}); raise --max-error"
            )
        return picked
    over = [n for n in chosen if errors[n] > budget]
    if over:
        n = max(over, key=lambda k: errors[k])
        raise UsageError(
            f"{at}--max-error {budget}: layer {n} exceeds it (MoE output error "
            f"{errors[n]:.4g}; {len(over)} layer(s) over: {_ranges(over)}); drop it from "
            "--requantize-layers or use --requantize-layers auto"
        )
    return chosen


def _ranges(layers: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``."""
    out: list[str] = []
    for n in layers:
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)
