"""Engine target specs as data: what an engine release's model holds, per TP rank.

One folder per target (``vllm-0.33/``), one YAML file per engine model file
(``deepseek_v2.yaml``; ``qwen2_moe.yaml`` and ``qwen3_moe.yaml`` both for ckpt's ``qwen3_moe``
family, told apart by config.json's ``architectures``), each citing the engine source it was read from. A new engine release
is a new folder (or an edited file), not new code. ``--layout vllm-sharded`` plans from these.

Example::

    spec = load_spec("deepseek_v3")            # vllm-0.33/deepseek_v2.yaml
    load_spec("qwen3_moe", architectures=["Qwen3MoeForCausalLM"])   # vllm-0.33/qwen3_moe.yaml
    spec.files.pattern                          # 'model-rank-{rank}-part-{part}.safetensors'
    list_specs()                                # [('vllm-0.33', 'deepseek_v3', ...yaml)]
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.targets.spec import TargetSpec
from checkpoint_tool.yamlio import safe_load

DEFAULT_TARGET = "vllm-0.33"
TARGETS_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=16)
def _read(path: Path) -> TargetSpec:
    try:
        data = safe_load(path.read_text())
        return TargetSpec.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a valid target spec ({first}); reinstall ckpt") from None


def list_specs() -> list[tuple[str, str, Path]]:
    """(target, family, file) of every bundled spec, sorted."""
    out = []
    for path in sorted(TARGETS_DIR.glob("*/*.yaml")):
        spec = _read(path)
        out.append((spec.target, spec.family, path))
    return out


def load_spec(
    family: str, target: str = DEFAULT_TARGET, architectures: list[str] | None = None
) -> TargetSpec:
    """The spec of model ``family`` (``ModelFacts.family``) under ``target``; where several
    files cover the family (``qwen2_moe.yaml``, ``qwen3_moe.yaml``), the one listing one of
    config.json's ``architectures`` (without them: the first)."""
    specs = list_specs()
    matches = [_read(path) for t, f, path in specs if t == target and f == family]
    if matches and architectures is not None:
        wanted = set(architectures)
        for spec in matches:
            if not spec.architectures or wanted & set(spec.architectures):
                return spec
        covered = sorted({a for spec in matches for a in spec.architectures})
        raise UsageError(
            f"--layout vllm-sharded: the {target} specs of family {family!r} cover "
            f"{', '.join(covered)}, not {', '.join(map(str, architectures)) or 'this model'}; "
            "use --layout hf"
        )
    if matches:
        return matches[0]
    known = sorted({f for t, f, _ in specs if t == target})
    if not known:
        raise UsageError(
            f"unknown engine target {target!r}; known: {sorted({t for t, _, _ in specs})}"
        )
    raise UsageError(
        f"--layout vllm-sharded has no {target} spec for model family {family!r} (supported: "
        f"{', '.join(known)}); use --layout hf"
    )


__all__ = ["DEFAULT_TARGET", "TARGETS_DIR", "TargetSpec", "list_specs", "load_spec"]
