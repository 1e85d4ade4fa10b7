"""``ckpt verify``: prove a converted checkpoint against its source.

- lossless (``verify.lossless``): every output tensor is the exact source bytes (and padding)
  the plan rebuilt from ``ckpt-manifest.json`` says it is;
- numeric (``verify.numeric``): sampled MoE layers of the converted checkpoint run through the
  bundled runtime match a float reference computed from the source;
- spread (``verify.spread``): the lossless check split like ``convert --part`` or over Ray
  tasks, and part reports merged into one.

Public API::

    from checkpoint_tool.verify import VerifyOptions, verify_checkpoint
    report = verify_checkpoint("/out/model", "/models/src", VerifyOptions(backend="torch"))
    report.passed, report.exit_code

    from checkpoint_tool.layers.loader import CheckpointView   # runtime layers from a checkpoint
    layer = CheckpointView.open("/out/model").layer(3, experts=[0, 5]).weights
"""

from checkpoint_tool.verify.report import (
    LayerResult,
    LosslessReport,
    NumericReport,
    TensorMismatch,
    VerifyReport,
)
from checkpoint_tool.verify.run import VerifyOptions, verify_checkpoint

__all__ = [
    "LayerResult",
    "LosslessReport",
    "NumericReport",
    "TensorMismatch",
    "VerifyOptions",
    "VerifyReport",
    "verify_checkpoint",
]
