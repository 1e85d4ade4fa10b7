"""The pure part of requantization: MXFP4 bytes from float weights, and source dequantization.

- ``mxfp4``: the quantizer (float32 ``[N, K]`` -> Quark's packed E2M1 codes and E8M0 scales);
- ``source``: a source weight (BF16, FP8 block/channel/tensor, MXFP8) as float32;
- ``scheme``: a requantized piece's ``requant`` and the scheme of the written tensors.

Choosing layers, the catalog view and the plan live in ``checkpoint_tool.requant``; the
executor's node in ``execute.requant_node``.

Example::

    from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4
    packed, scales = quantize_mxfp4(w)   # U8 [N, K/2], U8 [N, K/32]
"""
