"""Model-level facts from config.json: MoE layers, expert counts and sizes, checkpoint names."""

from checkpoint_tool.model.detect import model_facts
from checkpoint_tool.model.facts import (
    PROJS,
    ExpertNaming,
    ModelFacts,
    MoeLayerFacts,
    Proj,
)
from checkpoint_tool.model.families import family_of

__all__ = [
    "PROJS",
    "ExpertNaming",
    "ModelFacts",
    "MoeLayerFacts",
    "Proj",
    "family_of",
    "model_facts",
]
