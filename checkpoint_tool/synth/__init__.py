"""``ckpt synth``: small, format-faithful synthetic checkpoints (and sparse full-size layouts).

Public API::

    from checkpoint_tool.synth import PRESETS, synth_checkpoint
    synth_checkpoint("quark-hybrid", Path("hybrid"), seed=0)
    synth_checkpoint("deepseek-v3-fp8", Path("r1"), sparse=True)   # 163 shards, holes
"""

from checkpoint_tool.synth.builder import build_layout, synth_checkpoint
from checkpoint_tool.synth.presets import PRESETS, PresetOptions, PresetSpec

__all__ = ["PRESETS", "PresetOptions", "PresetSpec", "build_layout", "synth_checkpoint"]
