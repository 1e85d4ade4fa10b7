"""All synth presets by name (``ckpt synth --list``).

Example::

    PRESETS["quark-hybrid"].summary
    # 'Quark file2file hybrid: block-FP8 attention, MXFP4 experts, per-layer mixed shared'
"""

from __future__ import annotations

from checkpoint_tool.synth.presets.base import PresetOptions, PresetSpec
from checkpoint_tool.synth.presets.compressed_tensors import CT_PRESETS
from checkpoint_tool.synth.presets.deepseek_v3 import DEEPSEEK_V3_PRESETS
from checkpoint_tool.synth.presets.others import OTHER_PRESETS

PRESETS: dict[str, PresetSpec] = {
    p.name: p for p in [*DEEPSEEK_V3_PRESETS, *OTHER_PRESETS, *CT_PRESETS]
}

__all__ = ["PRESETS", "PresetOptions", "PresetSpec"]
