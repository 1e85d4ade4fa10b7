"""Storage formats: one module per format, each a ``Format`` (``base.py``) registered here.

``format_of(scheme)`` answers what a weight stores (roles, dtypes, packed and scale shapes,
slice regions, pads, alignment; no torch), how it decodes (the codec, torch on first use), how
the runtime runs it, its verify tolerance, how synth writes it and what vLLM names its scale.
See docs/formats.md, "Adding a format".

Two readers of formats stay apart on purpose: ``policy/engine/`` (vLLM's own view of a
checkpoint, which follows vLLM's source) and ``verify/expected.py`` (the independent verifier).

Example::

    from checkpoint_tool.formats import format_of
    fmt = format_of(scheme)                           # scheme.format: mxfp4, group 32
    fmt.storage_for(scheme).storage_shapes((4, 64))   # {'weight': (4, 32), 'scale': (4, 2)}
    fmt.short(scheme), fmt.kernel                     # ('mxfp4/32', 'MXFP4')
"""

from checkpoint_tool.formats.base import Format, Options, SynthPart
from checkpoint_tool.formats.fp8_block import Fp8Block
from checkpoint_tool.formats.fp8_scaled import Fp8PerChannel, Fp8PerTensor
from checkpoint_tool.formats.int4 import Int4
from checkpoint_tool.formats.mxfp4 import MxFp4
from checkpoint_tool.formats.mxfp8 import MxFp8
from checkpoint_tool.formats.nvfp4 import NvFp4
from checkpoint_tool.formats.registry import all_formats, format_of, register
from checkpoint_tool.formats.unquantized import Unquantized
from checkpoint_tool.formats.unsupported import Unsupported

# The registration: one line per format module, in the order tables list them.
for _fmt in (
    Unquantized(),
    Fp8PerTensor(),
    Fp8PerChannel(),
    Fp8Block(),
    MxFp4(),
    NvFp4(),
    MxFp8(),
    Int4(),
    Unsupported(),
):
    register(_fmt)

__all__ = ["Format", "Options", "SynthPart", "all_formats", "format_of", "register"]
