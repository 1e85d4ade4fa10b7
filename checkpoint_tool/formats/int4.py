"""``int4``: compressed-tensors ``pack-quantized`` INT4 (W4A16): what it stores, how it slices
and pads (no torch), and how the rest of ckpt treats it.

Roles and shapes for a logical ``[..., out, in]`` weight with groups of ``g`` inputs:

- ``weight`` (``weight_packed``) I32 ``[..., out, in/8]``: eight 4-bit values per word along
  the input dim, value ``j`` of a word in bits ``4j..4j+3``, stored as ``q + 8`` when
  symmetric (compressed-tensors ``pack_quantized/helpers.py`` ``pack_to_int32``);
- ``scale`` (``weight_scale``) ``[..., out, in/g]`` in the model's float dtype;
- ``zero_point`` (``weight_zero_point``, asymmetric only) I32 ``[..., out/8, in/g]``: packed
  along the *output* dim (``pack_to_int32(..., packed_dim=0)``).

A slice of the input dim must keep whole words and whole groups (``alignment`` = lcm(8, g));
of the output dim whole zero-point words when asymmetric (8). Pads append zero weights: the
word ``0x88888888`` when symmetric (eight ``q + 8`` with q = 0), zero words with zero points
0 when asymmetric; scales pad with 1.0.

Example (group 32, symmetric, logical ``[4, 64]``)::

    Int4Storage(32, "BF16").storage_shapes((4, 64))   # {'weight': (4, 8), 'scale': (4, 2)}
    Int4Storage(32, "BF16").alignment(-1, (4, 64))    # 32
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.formats.base import Options
from checkpoint_tool.formats.dtypes import is_float_dtype, one_fill
from checkpoint_tool.formats.grouped import Grouped
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.formats.storage import Axis, Shape, StorageFormat, where
from checkpoint_tool.regions import Pad

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme

#: values per I32 word
PACK = 8
#: one symmetric zero word (eight nibbles 8 = 0 + 8), little-endian hex
SYMMETRIC_ZERO_WORD = "88888888"


class Int4Storage(StorageFormat):
    """INT4 packed eight to an I32 along the input dim, a float scale per ``group_size``
    inputs, packed I32 zero points when ``symmetric`` is False."""

    format = WeightFormat.INT4
    weight_pack = PACK

    def __init__(self, group_size: int = 32, scale_dtype: str = "BF16", symmetric: bool = True):
        self.group_size = int(group_size)
        if self.group_size < 1 or self.group_size % PACK:
            raise InputError(
                f"int4: group size {group_size} must be a positive multiple of {PACK} "
                "(eight values share one I32 word)"
            )
        if not is_float_dtype(scale_dtype):
            raise InputError(
                f"{self.label}: scale dtype must be BF16, F16 or F32, not {scale_dtype}"
            )
        self.scale_dtype = scale_dtype
        self.symmetric = bool(symmetric)
        self.roles = ("weight", "scale") if self.symmetric else ("weight", "scale", "zero_point")

    @property
    def label(self) -> str:
        sym = "" if getattr(self, "symmetric", True) else " asymmetric"
        return f"int4/{getattr(self, 'group_size', '?')}{sym}"

    def storage_dtypes(self) -> dict[str, str]:
        dtypes = {"weight": "I32", "scale": self.scale_dtype, "zero_point": "I32"}
        return {role: dtypes[role] for role in self.roles}

    def axis(self, role: str, ndim: int, dim: int) -> Axis | None:
        if dim == ndim - 1:
            if role == "weight":
                return Axis(PACK, packed=True)
            return Axis(self.group_size)
        if dim == ndim - 2 and role == "zero_point":
            return Axis(PACK, packed=True)
        return Axis()

    def storage_pads(
        self, logical_shape: Shape, dim: int, amount: int, *, name: str | None = None
    ) -> dict[str, Pad | None]:
        """Append ``amount`` logical zeros on ``dim``: the symmetric weight with zero words
        (``0x88888888``; zero bytes would be -8), the asymmetric weight and its zero points
        with zero words, scales with 1.0. Whole words only (``AlignmentError`` otherwise)."""
        shape, d, axes = self._axes_on(logical_shape, dim, name)
        n = shape[d]
        for role, ax in axes.items():
            if ax is not None and ax.packed and (amount % ax.unit or n % ax.unit):
                raise AlignmentError(
                    f"{where(name)}cannot pad {self.label} dim {dim} (size {n}) by {amount}: "
                    f"the size and the amount must be multiples of {ax.unit} ({ax.why(role)})"
                )
        fills = {
            "weight": SYMMETRIC_ZERO_WORD if self.symmetric else "00000000",
            "scale": one_fill(self.scale_dtype),
            "zero_point": "00000000",
        }
        out: dict[str, Pad | None] = {}
        for role, ax in axes.items():
            grow = 0 if ax is None else ax.storage_size(n + amount) - ax.storage_size(n)
            out[role] = Pad(dim=d, amount=grow, fill=fills[role]) if grow else None
        return out


class Int4(Grouped):
    """The format object: the runtime's INT4 branch runs the symmetric form (the asymmetric one
    runs on the torch backend), no activation quantization, scales as stored."""

    member = WeightFormat.INT4
    storage_class = Int4Storage
    codec_path = "checkpoint_tool.quant.codecs.int4:Int4Codec"
    packed_dtypes = ("I32",)
    kernel = "INT4"
    default_group = 32

    def build(self, cls: type[Any], options: Options) -> Any:
        return cls(options.group_size or 32, options.scale_dtype or "BF16", options.symmetric)

    def alignment(self, scheme: Scheme, dim: int) -> int:
        """Input dim: whole words and whole groups; output dim: whole zero-point words when
        asymmetric (8), else 1."""
        storage = self.storage(group_size=scheme.group_size, symmetric=scheme.zero_point_suffix is None)
        return storage.alignment(dim, (1, 1))
