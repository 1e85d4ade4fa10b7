"""The ``ckpt verify`` report: lossless (bytes) and numeric (runtime vs reference) sections.

Pydantic models, so ``--format json`` is ``report.model_dump(mode="json")``. ``passed`` is the
one bit CI cares about; the CLI exits 1 when it is False.

Example (abridged JSON)::

    {"dst": "/out/model", "source": "/models/quark-mxfp4", "passed": false,
     "lossless": {"status": "failed", "tensors_checked": 213, "bytes_compared": 2817024,
                  "mismatches": [{"tensor": "model.layers.1.mlp.experts.3.up_proj.weight",
                                  "file": "model-00001-of-00001.safetensors",
                                  "kind": "bytes_differ", "elements_differ": 2, ...}]},
     "numeric": {"status": "failed", "backend": "torch", "device": "cpu", "tp": 2,
                 "layers": [{"layer": 1, "fused": true, "padded": false,
                             "routed_scheme": "mxfp4/32", "max_abs_error": 0.41,
                             "rel_error": 0.0123, "rel_tolerance": 1e-4, "status": "failed"}]}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["passed", "failed", "skipped"]
MismatchKind = Literal[
    "bytes_differ",  # same dtype/shape, different bytes
    "missing",  # planned but not in the output file (or the file is missing)
    "header_differs",  # dtype or shape differ from the plan
    "unexpected",  # in an output file, not in the plan
    "unreadable",  # the output file cannot be read (truncated, bad header)
    "file_differs",  # config.json / index / a side file differs from what the plan writes
]


class TensorMismatch(BaseModel):
    """One output tensor (or file: ``tensor`` empty) that is not what the plan says."""

    tensor: str
    file: str
    kind: MismatchKind
    message: str
    #: for bytes_differ: storage elements that differ, out of ``elements``
    elements_differ: int | None = None
    elements: int | None = None
    #: storage index of the first differing element, e.g. [3, 17]
    first_index: list[int] | None = None
    #: where that element comes from: "source <name>" or "padding of <name> (fill 7f)"
    origin: str | None = None
    expected_hex: str | None = None
    actual_hex: str | None = None


class LosslessReport(BaseModel):
    """Every output tensor compared with the source bytes the plan says it is made of."""

    status: Status
    reason: str | None = None
    plan_sha256: str | None = None
    #: whether the plan rebuilt from the source equals the one convert executed (manifest)
    plan_matches_manifest: bool | None = None
    files_checked: int = 0
    tensors_checked: int = 0
    tensors_padded: int = 0
    bytes_compared: int = 0
    mismatches: list[TensorMismatch] = Field(default_factory=list)
    #: mismatches beyond the first ``--max-mismatches`` are counted, not listed
    mismatches_not_listed: int = 0
    seconds: float = 0.0

    @property
    def mismatch_count(self) -> int:
        return len(self.mismatches) + self.mismatches_not_listed


class LayerResult(BaseModel):
    """One sampled MoE layer: converted checkpoint through the runtime vs source reference."""

    layer: int
    status: Status
    #: why this layer was sampled, e.g. "fused, padded, mxfp4/32 routed, mxfp4/32 shared"
    policy: str = ""
    fused: bool = False
    padded: bool = False
    is_mtp: bool = False
    routed_scheme: str = ""
    shared_scheme: str | None = None
    tokens: int = 0
    #: distinct routed experts the sampled tokens chose (loaded from both checkpoints)
    experts_used: int = 0
    #: tokens whose chosen experts differ between the source and the converted router
    routing_mismatches: int = 0
    max_abs_error: float | None = None
    #: max |runtime - reference| / max |reference|
    max_rel_error: float | None = None
    #: ||runtime - reference||_2 / ||reference||_2
    rel_error: float | None = None
    rel_tolerance: float | None = None
    max_rel_tolerance: float | None = None
    #: what the tolerance is derived from, e.g. "weight-only mxfp4, float32 activations"
    tolerance_basis: str = ""
    reference_norm: float | None = None
    message: str | None = None
    #: wall time of the layer: ``read`` (both checkpoints, in the read-ahead thread) plus the
    #: ``runtime`` (converted weights sliced per rank, the MoE kernels); ``decode`` (source
    #: weights through the codecs on the device) and ``reference`` (float64 products) run
    #: while the converted side is still being read, so they are inside ``read``
    seconds: float = 0.0
    read_seconds: float = 0.0
    decode_seconds: float = 0.0
    reference_seconds: float = 0.0
    runtime_seconds: float = 0.0


class EngramResult(BaseModel):
    """One DeepSeek-V4.1 engram table: sampled rows of the converted table, as vLLM loads it,
    against the source's (``verify.engram``)."""

    layer: int
    #: the converted table's weight, e.g. "model.layers.1.engram.embed_tokens.weight"
    tensor: str
    status: Status
    rows_checked: int = 0
    max_abs_error: float | None = None
    message: str | None = None


class NumericReport(BaseModel):
    """The sampled layers; ``ran_layers`` / ``skipped_layers`` say which ran (each result's
    ``message`` says why one did not). A skipped layer fails the check (``status`` failed)
    unless ``--allow-skipped`` (``allow_skipped``)."""

    status: Status
    reason: str | None = None
    ran_layers: list[int] = Field(default_factory=list)
    skipped_layers: list[int] = Field(default_factory=list)
    #: selected by ``--layers all`` but not started within ``--max-seconds``
    not_run_layers: list[int] = Field(default_factory=list)
    #: ``--layers``: "sample", "all" or the layer numbers given
    selection: str = "sample"
    max_seconds: float | None = None
    allow_skipped: bool = False
    backend: str = ""
    device: str = ""
    tp: int = 1
    tokens: int = 0
    seed: int = 0
    layout: str = "hf"
    layers: list[LayerResult] = Field(default_factory=list)
    #: DeepSeek-V4.1 engram tables (empty for other models)
    engram: list[EngramResult] = Field(default_factory=list)
    seconds: float = 0.0


class VerifyReport(BaseModel):
    """What ``ckpt verify DST --source SRC`` found."""

    dst: str
    source: str
    passed: bool
    lossless: LosslessReport
    numeric: NumericReport
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


#: ``NumericReport.reason`` when the user turned the numeric check off
NO_NUMERIC = "--no-numeric"


def overall(lossless: LosslessReport, numeric: NumericReport) -> bool:
    """Passed unless a section failed. A numeric check that could not run is not a pass: it
    fails unless the user turned it off (``--no-numeric``) or allowed it (``--allow-skipped``).
    """
    if lossless.status == "failed" or numeric.status == "failed":
        return False
    if numeric.allow_skipped or numeric.reason == NO_NUMERIC:
        return True
    return not numeric.skipped_layers and numeric.status != "skipped"


SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "verify-report.schema.json"


def write_schema(path: Path = SCHEMA_PATH) -> None:
    """Write the JSON Schema of ``VerifyReport`` (docs/schemas, checked by a test)."""
    path.write_text(json.dumps(VerifyReport.model_json_schema(), indent=2, sort_keys=True) + "\n")
