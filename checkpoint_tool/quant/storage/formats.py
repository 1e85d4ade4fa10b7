"""What each weight format ckpt understands stores, and how to pick one.

One class per format: its roles, storage dtypes and ``Axis`` table (see ``base.py``). The
codecs in ``quant.codecs`` subclass these and add quantize/dequantize; planning and
``inspect`` need only this, so they never import torch.

Example::

    storage_for_format("mxfp4").storage_shapes((4, 64))   # {'weight': (4, 32), 'scale': (4, 2)}
    get_storage_format(scheme)        # scheme: fp8_block [128, 128], scale F32 -> Fp8BlockStorage
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.quant.storage.base import Axis, Shape, StorageFormat
from checkpoint_tool.quant.storage.dtypes import is_e8m0_dtype, is_float_dtype
from checkpoint_tool.quant.storage.int4 import Int4Storage

MX_SCALE_MODES = ("even", "floor")


class UnquantizedStorage(StorageFormat):
    """BF16 / F16 / F32 weights of any rank."""

    format = WeightFormat.UNQUANTIZED
    roles = ("weight",)
    min_ndim = 0

    def __init__(self, dtype: str = "BF16") -> None:
        if not is_float_dtype(dtype):
            raise InputError(f"unquantized weights must be BF16, F16 or F32, not {dtype}")
        self.dtype = dtype

    @property
    def label(self) -> str:
        return f"unquantized {self.dtype}"

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": self.dtype}


def check_float_scale_dtype(dtype: str, label: str) -> str:
    if not is_float_dtype(dtype):
        raise InputError(f"{label}: scale dtype must be F32, BF16 or F16, not {dtype}")
    return dtype


class Fp8ScaledStorage(StorageFormat):
    """FP8 E4M3 elements with float scales over whole trailing dims (``scale_drop`` of them)."""

    roles = ("weight", "scale")
    #: trailing logical dims the scale does not have (per tensor: out and in; per channel: in)
    scale_drop: int

    def __init__(self, scale_dtype: str = "F32") -> None:
        self.scale_dtype = check_float_scale_dtype(scale_dtype, self.label)

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}

    def role_ndim(self, role: str, ndim: int) -> int:
        return ndim - self.scale_drop if role == "scale" else ndim

    def accepted_shapes(self, role: str, want: Shape) -> list[Shape]:
        return [want, (*want, 1)] if role == "scale" else [want]


class Fp8TensorStorage(Fp8ScaledStorage):
    """One scale per matrix: 0-d for ``[out, in]`` (``[1]`` accepted), ``[E]`` for
    ``[E, out, in]`` (``[E, 1]`` accepted)."""

    format = WeightFormat.FP8_PER_TENSOR
    scale_drop = 2


class Fp8ChannelStorage(Fp8ScaledStorage):
    """One scale per output row: ``[..., out]`` (``[..., out, 1]`` accepted)."""

    format = WeightFormat.FP8_PER_CHANNEL
    scale_drop = 1


class Fp8BlockStorage(StorageFormat):
    """FP8 E4M3, one scale per ``[b0, b1]`` block: ``[..., ceil(out/b0), ceil(in/b1)]``."""

    format = WeightFormat.FP8_BLOCK
    roles = ("weight", "scale")

    def __init__(
        self, block: tuple[int, int] = (128, 128), scale_dtype: str = "F32", e8m0: bool = False
    ) -> None:
        self.block = (int(block[0]), int(block[1]))
        if min(self.block) < 1:
            raise InputError(f"fp8_block: block size must be positive, got {list(block)}")
        if not (is_float_dtype(scale_dtype) or is_e8m0_dtype(scale_dtype)):
            raise InputError(
                f"{self.label}: scale dtype must be F32/BF16/F16 or U8/F8_E8M0 (e8m0), not {scale_dtype}"
            )
        self.scale_dtype = scale_dtype
        self.e8m0 = e8m0 or is_e8m0_dtype(scale_dtype)

    @property
    def label(self) -> str:
        suffix = " ue8m0" if getattr(self, "e8m0", False) else ""
        return f"fp8_block[{self.block[0]},{self.block[1]}]{suffix}"

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}

    def axis(self, role: str, ndim: int, dim: int) -> Axis | None:
        if role == "scale" and dim >= ndim - 2:
            return Axis(self.block[dim - (ndim - 2)])
        return Axis()


class GroupedStorage(StorageFormat):
    """One scale per ``group_size`` elements of the input (last) dim: MX and NVFP4.

    Packed weights (``weight_pack`` 2: FP4) need groups of whole bytes. A role the format
    drops trailing dims from (NVFP4's per-matrix ``global_scale``) has no axis there.
    """

    roles: tuple[str, ...] = ("weight", "scale")
    #: what to say about a scale dtype ``scale_dtype_ok`` refuses (``{label}``, ``{dtype}``)
    scale_dtype_error: str

    def __init__(self, group_size: int, scale_dtype: str) -> None:
        self.group_size = int(group_size)
        if self.group_size < 1 or (self.weight_pack > 1 and self.group_size % self.weight_pack):
            raise InputError(f"{self.format.value}: invalid group size {group_size}")
        if not self.scale_dtype_ok(scale_dtype):
            raise InputError(self.scale_dtype_error.format(label=self.label, dtype=scale_dtype))
        self.scale_dtype = scale_dtype

    def scale_dtype_ok(self, dtype: str) -> bool:
        raise NotImplementedError

    @property
    def label(self) -> str:
        return f"{self.format.value}/{getattr(self, 'group_size', '?')}"

    def axis(self, role: str, ndim: int, dim: int) -> Axis | None:
        if dim >= self.role_ndim(role, ndim):
            return None
        if dim == ndim - 1:
            if role == "scale":
                return Axis(self.group_size)
            return Axis(self.weight_pack, packed=self.weight_pack > 1)
        return Axis()


class MxStorage(GroupedStorage):
    """OCP MX: one E8M0 scale (``U8`` or ``F8_E8M0``) per ``group`` elements of the input dim."""

    scale_dtype_error = "{label}: scales are E8M0, stored as U8 or F8_E8M0, not {dtype}"

    def __init__(
        self, group_size: int = 32, scale_dtype: str = "U8", scale_mode: str = "even"
    ) -> None:
        super().__init__(group_size, scale_dtype)
        if scale_mode not in MX_SCALE_MODES:
            raise InputError(f"{self.label}: unknown scale mode {scale_mode!r} (even, floor)")
        self.scale_mode = scale_mode

    def scale_dtype_ok(self, dtype: str) -> bool:
        return is_e8m0_dtype(dtype)


class MxFp4Storage(MxStorage):
    """MXFP4: E2M1 packed two per byte (``U8`` ``[..., out, in/2]``)."""

    format = WeightFormat.MXFP4
    weight_pack = 2

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "U8", "scale": self.scale_dtype}


class MxFp8Storage(MxStorage):
    """MXFP8: E4M3 elements (``F8_E4M3`` ``[..., out, in]``)."""

    format = WeightFormat.MXFP8
    weight_pack = 1

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}


class NvFp4Storage(GroupedStorage):
    """NVFP4: E2M1 packed, an E4M3 scale per 16 inputs, an F32 global scale per matrix."""

    format = WeightFormat.NVFP4
    roles = ("weight", "scale", "global_scale")
    weight_pack = 2
    scale_dtype_error = "nvfp4: scales are E4M3 (F8_E4M3), not {dtype}"

    def __init__(
        self, group_size: int = 16, scale_dtype: str = "F8_E4M3", global_divides: bool = False
    ) -> None:
        super().__init__(group_size, scale_dtype)
        #: compressed-tensors' ``weight_global_scale`` divides (ModelOpt's multiplies)
        self.global_divides = bool(global_divides)

    def scale_dtype_ok(self, dtype: str) -> bool:
        return dtype in ("F8_E4M3", "U8")  # E4M3 bytes, or the same bytes as U8

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "U8", "scale": self.scale_dtype, "global_scale": "F32"}

    def role_ndim(self, role: str, ndim: int) -> int:
        return ndim - 2 if role == "global_scale" else ndim

    def accepted_shapes(self, role: str, want: Shape) -> list[Shape]:
        """A global scale is 0-d (ModelOpt) or ``[1]`` (compressed-tensors) per matrix."""
        return [want, (*want, 1)] if role == "global_scale" else [want]


#: the storage class of each format; ``quant.codecs`` passes its own table (same arguments)
STORAGE_FORMATS: dict[WeightFormat, type[StorageFormat]] = {
    WeightFormat.UNQUANTIZED: UnquantizedStorage,
    WeightFormat.FP8_PER_TENSOR: Fp8TensorStorage,
    WeightFormat.FP8_PER_CHANNEL: Fp8ChannelStorage,
    WeightFormat.FP8_BLOCK: Fp8BlockStorage,
    WeightFormat.MXFP4: MxFp4Storage,
    WeightFormat.MXFP8: MxFp8Storage,
    WeightFormat.NVFP4: NvFp4Storage,
    WeightFormat.INT4: Int4Storage,
}


def storage_for_format(
    fmt: WeightFormat | str,
    *,
    block: tuple[int, int] | None = None,
    group_size: int | None = None,
    scale_dtype: str | None = None,
    scale_is_e8m0: bool = False,
    weight_dtype: str | None = None,
    scale_mode: str | None = None,
    symmetric: bool = True,
    global_scale_divides: bool = False,
    classes: Mapping[WeightFormat, type[Any]] = STORAGE_FORMATS,
) -> StorageFormat:
    """An instance of ``classes[fmt]`` with defaults for anything not given.

    Defaults: block (128, 128); groups 32 (MX) / 16 (NVFP4); scales F32 (FP8), U8 (MX),
    F8_E4M3 (NVFP4); MX scale mode "even"; unquantized weight dtype BF16.
    ``scale_is_e8m0`` makes FP8 block scales powers of two (DeepSeek ``scale_fmt: ue8m0``).
    INT4 (compressed-tensors): group 32, scales BF16, ``symmetric`` unless zero points are
    stored. NVFP4: ``global_scale_divides`` for compressed-tensors' ``weight_global_scale``.
    """
    fmt = WeightFormat(fmt)
    cls = classes.get(fmt)
    if cls is None:
        raise InputError(f"no codec for weight format '{fmt.value}' (ckpt cannot decode it)")
    if fmt is WeightFormat.UNQUANTIZED:
        return cls(weight_dtype or "BF16")
    if fmt in (WeightFormat.FP8_PER_TENSOR, WeightFormat.FP8_PER_CHANNEL):
        return cls(scale_dtype or "F32")
    if fmt is WeightFormat.FP8_BLOCK:
        b = tuple(block) if block else (128, 128)
        if len(b) != 2:
            raise InputError(f"fp8_block: block size must be [rows, cols], got {list(b)}")
        return cls((int(b[0]), int(b[1])), scale_dtype or "F32", e8m0=scale_is_e8m0)
    if fmt in (WeightFormat.MXFP4, WeightFormat.MXFP8):
        return cls(group_size or 32, scale_dtype or "U8", scale_mode or "even")
    if fmt is WeightFormat.INT4:
        return cls(group_size or 32, scale_dtype or "BF16", symmetric)
    return cls(group_size or 16, scale_dtype or "F8_E4M3", global_scale_divides)  # NVFP4


def scheme_arguments(scheme: Scheme) -> dict[str, Any]:
    """``storage_for_format`` arguments for a resolved ``scheme`` (refuses unsupported ones)."""
    if scheme.format is WeightFormat.UNSUPPORTED:
        raise InputError(
            f"no codec for this quantization scheme (rule: {scheme.rule or 'unknown'}); "
            "ckpt can copy such tensors but not decode them"
        )
    return {
        "fmt": scheme.format,
        "block": scheme.block,
        "group_size": scheme.group_size,
        "scale_dtype": _first(scheme.scale_dtypes),
        "scale_is_e8m0": scheme.scale_is_e8m0,
        "weight_dtype": _first(scheme.weight_dtypes) if not scheme.quantized else None,
        "scale_mode": _scale_mode(scheme.spec),
        "symmetric": scheme.zero_point_suffix is None,
        "global_scale_divides": scheme.global_scale_divides,
    }


def get_storage_format(scheme: Scheme) -> StorageFormat:
    """What weights stored per ``scheme`` look like: dtypes, shapes, regions, pads."""
    return storage_for_format(**scheme_arguments(scheme))


def scheme_alignment(scheme: Scheme, dim: int) -> int:
    """Logical granularity of slices of ``dim`` (-2: rows, out; -1: columns, in) of a weight
    stored per ``scheme``: the storage codec's ``alignment``, from the scheme's geometry alone
    (dtypes do not change it). 1 for a scheme ckpt has no codec for.

    Example: MXFP4/32 -> -1: 32 (scale groups, two values a byte), -2: 1;
    fp8_block[128,64] -> -2: 128, -1: 64.
    """
    if scheme.format is WeightFormat.UNSUPPORTED:
        return 1
    storage = storage_for_format(
        scheme.format,
        block=scheme.block,
        group_size=scheme.group_size,
        symmetric=scheme.zero_point_suffix is None,
    )
    return storage.alignment(dim, (1, 1))


def _first(dtypes: Iterable[str]) -> str | None:
    for d in dtypes:
        return d
    return None


def _scale_mode(spec: Any) -> str | None:
    """Quark ``scale_calculation_mode`` of the weight spec, if the producer recorded one."""
    if isinstance(spec, dict):
        weight = spec.get("weight", spec)
        for cfg in weight if isinstance(weight, list) else [weight]:
            if isinstance(cfg, dict) and cfg.get("scale_calculation_mode") in ("even", "floor"):
                return str(cfg["scale_calculation_mode"])
    return None
