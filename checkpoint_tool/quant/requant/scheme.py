"""What a requantized shared-expert projection is called and how it reads back.

- ``REQUANT``: a plan piece with ``requant="mxfp4"`` and source ``<module>.weight`` (or
  ``<module>.weight_scale``) is that module's source weight requantized (its codes, or its
  scales), not a byte copy; the executor (``execute.requant_node``) and verify
  (``verify.requant``) both read the field.
- ``GROUP``: elements per scale; ``SCALE_SUFFIXES``: a source weight's scale names;
- ``MXFP4_SCHEME``: the scheme of the written tensors (Quark's MXFP4 storage: ``weight`` U8
  ``[N, K/2]``, ``weight_scale`` U8 E8M0 ``[N, K/32]``), as the runtime dequantizes them.

Example::

    Piece("model.layers.1.mlp.shared_experts.down_proj.weight", requant=REQUANT)
    MXFP4_SCHEME.format, MXFP4_SCHEME.group_size   # (WeightFormat.MXFP4, 32)
"""

from __future__ import annotations

from checkpoint_tool.quant.scheme import Scheme, WeightFormat

# torch-free: the executor imports this module in the plain byte-copy path

#: elements per E8M0 scale (OCP MX)
GROUP = 32
#: the sibling suffixes a source weight's scale may have, in the order they are looked up
SCALE_SUFFIXES = ("weight_scale_inv", "weight_scale")
#: a requantized piece's ``requant`` (``regions.Piece``)
REQUANT = "mxfp4"
#: how MXFP4 shared experts read back in the runtime (Quark's storage)
MXFP4_SCHEME = Scheme(
    format=WeightFormat.MXFP4,
    weight_dtypes=("U8",),
    group_size=32,
    scale_suffix="weight_scale",
    scale_dtypes=("U8",),
    scale_is_e8m0=True,
    source="quark",
    rule="requantized by ckpt",
)
