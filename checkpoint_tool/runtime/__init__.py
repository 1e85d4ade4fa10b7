"""MoE runtime: run one MoE layer from checkpoint tensors (Triton or torch) and its reference.

Example::

    from checkpoint_tool.runtime import MoeLayerWeights, RoutingConfig, moe_reference, run_moe
    y = run_moe(x, layer, RoutingConfig.from_hf_config(config), backend="triton", tp=2)
    torch.testing.assert_close(y.float(), moe_reference(x, layer, routing), rtol=1e-2, atol=1e-2)

See docs/runtime.md. Importing this package does not import triton.
"""

from checkpoint_tool.runtime.moe import PreparedMoe, prepare_moe, run_moe, run_prepared
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig, route
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection

__all__ = [
    "ExpertWeights",
    "MoeLayerWeights",
    "PreparedMoe",
    "Projection",
    "RoutingConfig",
    "moe_reference",
    "prepare_moe",
    "route",
    "run_moe",
    "run_prepared",
]
