"""The rules of ``ckpt validate``, in the order they run and are reported.

One function per rule, grouped by module (structure, completeness, schemes, scales, checksums,
drift, deep). Each takes the ``ValidationContext`` and returns ``Issue`` findings; raising
``Unavailable`` marks the rule skipped with the reason. The ``id`` is stable: CI filters on it,
JUnit names a testcase after it, and it is the ``rule`` of the findings the function makes.

Example::

    [c.id for c in CHECKS][:3]   # ['index_valid', 'index_paths', 'shard_missing']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from checkpoint_tool.report import Issue
from checkpoint_tool.validate import (
    checksums,
    completeness,
    deep,
    drift,
    engine,
    scales,
    schemes,
    structure,
)
from checkpoint_tool.validate.context import ValidationContext


@dataclass(frozen=True)
class Check:
    """One rule: stable id, category, one-line title, and the function that applies it."""

    id: str
    category: str
    fn: Callable[[ValidationContext], list[Issue]]

    @property
    def title(self) -> str:
        doc = (self.fn.__doc__ or self.id).strip().splitlines()[0]
        return doc.rstrip(".").replace("``", "")


CHECKS: list[Check] = [
    # structure: files, index, headers
    Check("index_valid", "structure", structure.check_index_valid),
    Check("index_paths", "structure", structure.check_index_paths),
    Check("shard_missing", "structure", structure.check_shard_missing),
    Check("shard_unreferenced", "structure", structure.check_shard_unreferenced),
    Check("shard_truncated", "structure", structure.check_shard_truncated),
    Check("header_valid", "structure", structure.check_header_valid),
    Check("offsets_in_range", "structure", structure.check_offsets_in_range),
    Check("tensor_duplicate", "structure", structure.check_tensor_duplicate),
    Check("index_tensors", "structure", structure.check_index_tensors),
    Check("total_size", "structure", structure.check_total_size),
    # completeness against config.json
    Check("config_json", "completeness", completeness.check_config_json),
    Check("quant_config", "completeness", completeness.check_quant_config),
    Check("layers_present", "completeness", completeness.check_layers_present),
    Check("experts_present", "completeness", completeness.check_experts_present),
    Check("scales_present", "completeness", completeness.check_scales_present),
    Check("tensors_explained", "completeness", completeness.check_tensors_explained),
    # per-scheme storage
    Check("weight_dtype", "schemes", schemes.check_weight_dtype),
    Check("scale_dtype", "schemes", schemes.check_scale_dtype),
    Check("scale_shape", "schemes", schemes.check_scale_shape),
    Check("expert_shapes", "schemes", schemes.check_expert_shapes),
    # tensor values (byte-range reads)
    Check("scale_values", "scales", scales.check_scale_values),
    Check("weight_values", "scales", scales.check_weight_values),
    # provenance and policy
    Check("checksums", "checksums", checksums.check_checksums),
    Check("policy_drift", "drift", drift.check_policy_drift),
    # the target engine's verdict (the engine model of ckpt inspect --target)
    Check("engine_loads", "engine", engine.check_engine_loads),
    Check("deep_runtime", "deep", deep.check_deep_runtime),
]

CHECK_IDS = [c.id for c in CHECKS]
