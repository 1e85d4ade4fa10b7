"""``ckpt validate``: the pre-publish gate (structure, completeness, schemes, scales, checksums,
policy drift, optional runtime run) producing a typed ``ValidateReport``.

Example::

    from checkpoint_tool.validate import ValidateOptions, validate_checkpoint
    report = validate_checkpoint(Path("out/"), ValidateOptions(scan_weights=True))
    report.exit_code, report.summary.errors   # (0, 0)
"""

from checkpoint_tool.validate.context import ValidateOptions
from checkpoint_tool.validate.report import CheckResult, CheckStatus, ValidateReport
from checkpoint_tool.validate.runner import validate_checkpoint

__all__ = [
    "CheckResult",
    "CheckStatus",
    "ValidateOptions",
    "ValidateReport",
    "validate_checkpoint",
]
