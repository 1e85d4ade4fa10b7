"""The plan as a JSON document: the pydantic models that validate a plan read back from JSON.

Inside ckpt a plan is compact (``plan.model``); these models are its edge: field names, order
and defaults of ``ckpt plan --format json`` and of the manifest's plan hash. ``plan.json_edge``
writes the same bytes from the compact plan without building them (a full-size plan has
~92k tensors), and a test holds the two writers to each other.

Example::

    PlanDocument.model_validate(json.loads(Path("plan.json").read_text())).files[0].name
    # 'model-00001-of-00002.safetensors'
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from checkpoint_tool.plan.model import DroppedTensor, PlanOptions
from checkpoint_tool.plan.summary import PlanSummary


class RegionDocument(BaseModel):
    dim: int
    start: int
    stop: int


class PadDocument(BaseModel):
    dim: int
    amount: int
    fill: str = "00"


class PieceDocument(BaseModel):
    source: str
    slices: list[RegionDocument] = Field(default_factory=list)
    pads: list[PadDocument] = Field(default_factory=list)


class OutputTensorDocument(BaseModel):
    name: str
    dtype: str
    shape: list[int]
    pieces: list[PieceDocument]
    combine: Literal["single", "concat", "stack"] = "single"
    axis: int = 0
    ops: list[str] = Field(default_factory=list)
    layer: int | None = None
    fill: str | None = None


class OutputFileDocument(BaseModel):
    name: str
    tensors: list[OutputTensorDocument]
    nbytes: int = 0
    rank: int | None = None


class PlanDocument(BaseModel):
    ckpt_version: str
    source: str
    source_revision: str | None = None
    recipe: str
    options: PlanOptions
    files: list[OutputFileDocument]
    dropped: list[DroppedTensor] = Field(default_factory=list)
    config: dict[str, Any] | None = None
    side_files: list[str] = Field(default_factory=list)
    fse_layers: dict[int, bool] = Field(default_factory=dict)
    provenance: dict[str, list[str]] = Field(default_factory=dict)
    summary: PlanSummary | None = None
    notes: list[str] = Field(default_factory=list)
