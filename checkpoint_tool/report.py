"""One finding about a checkpoint, shared by every report (resolve, inspect, validate, verify).

Example::

    Issue(severity="error", tensor="model.layers.3.mlp.experts.0.gate_proj.weight_scale",
          file="model-00001-of-00002.safetensors", rule="scale_shape",
          message="scale has shape [192, 3], mxfp4/32 needs [192, 4]")
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning"]


class Issue(BaseModel):
    """A finding: ``rule`` is a short stable id (for filtering and CI), ``message`` one line."""

    model_config = ConfigDict(frozen=True)

    severity: Severity
    tensor: str | None = None
    file: str | None = None
    rule: str
    message: str

    def line(self) -> str:
        """One human line: ``error [scale_shape] file: tensor: message``."""
        where = ": ".join(p for p in (self.file, self.tensor) if p)
        return f"{self.severity} [{self.rule}] {where + ': ' if where else ''}{self.message}"
