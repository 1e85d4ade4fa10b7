"""What a tensor is to its module, read off the last component of its name: the one table.

Every reader that needs "is this the weight, a scale, a global scale, ..." asks here (scheme
resolution, the vLLM target shapes, verify's loaders, validate's scale checks).

Example::

    role_of_suffix("weight_scale_inv")   # 'scale'       (DeepSeek FP8 block scales)
    role_of_suffix("weight_scale_2")     # 'global_scale' (NVFP4 per-tensor multiplier)
    role_of_suffix("e_score_correction_bias")  # 'bias'
    role_of_suffix("tid2eid")            # 'other'
"""

from __future__ import annotations

from typing import Literal

Role = Literal["weight", "scale", "global_scale", "input_scale", "zero_point", "bias", "other"]

#: parameter suffix (the last name component) -> role
ROLE_BY_SUFFIX: dict[str, Role] = {
    "weight": "weight",
    "weight_packed": "weight",  # compressed-tensors pack-quantized / nvfp4-pack-quantized
    "weight_scale": "scale",
    "weight_scale_inv": "scale",
    "scale": "scale",
    "weight_scale_2": "global_scale",
    "weight_global_scale": "global_scale",  # compressed-tensors NVFP4 (a divisor)
    "input_scale": "input_scale",
    "input_scale_2": "input_scale",
    "input_global_scale": "input_scale",  # compressed-tensors NVFP4
    "weight_zero_point": "zero_point",  # compressed-tensors asymmetric int (packed along out)
    "bias": "bias",
    "e_score_correction_bias": "bias",
}

#: the roles that hold scales of the module's weight or activations
SCALE_ROLES: tuple[Role, ...] = ("scale", "global_scale", "input_scale", "zero_point")

#: the roles a storage codec describes (weight and weight scales; the rest is copied whole)
CODEC_ROLES: tuple[Role, ...] = ("weight", "scale", "global_scale", "zero_point")


def role_of_suffix(suffix: str) -> Role:
    """Role of a parameter ``suffix`` (``"weight_scale"`` -> ``"scale"``); ``"other"`` if unknown."""
    return ROLE_BY_SUFFIX.get(suffix, "other")


def suffixes_of(*roles: Role) -> tuple[str, ...]:
    """The suffixes that hold any of ``roles``: ``suffixes_of("scale")`` ->
    ``("weight_scale", "weight_scale_inv", "scale")``."""
    return tuple(s for s, r in ROLE_BY_SUFFIX.items() if r in roles)
