"""What the group-scaled formats share: one scale per ``group_size`` elements of the input
(last) dim. ``MxStorage`` adds OCP MX's E8M0 scales (MXFP4, MXFP8); NVFP4 its E4M3 ones.

Example (MXFP4/32, logical ``[4, 64]``)::

    MxFp4Storage(32, "U8").axis("scale", 2, 1)    # Axis(unit=32, packed=False)
    MxFp4Storage(32, "U8").axis("weight", 2, 1)   # Axis(unit=2, packed=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.base import Format, Options
from checkpoint_tool.formats.dtypes import is_e8m0_dtype
from checkpoint_tool.formats.storage import Axis, StorageFormat

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme

MX_SCALE_MODES = ("even", "floor")


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


class Grouped(Format):
    """A group-scaled format: labelled with its group size, one scale per (row, group)."""

    #: the group size when the scheme names none
    default_group: int = 32

    def scale_block(self, scheme: Scheme) -> tuple[int | None, int | None]:
        return (1, int(scheme.group_size or self.default_group))

    def short(self, scheme: Scheme) -> str:
        return f"{self.name}/{scheme.group_size}" if scheme.group_size else self.name


class Mx(Grouped):
    """OCP MX (MXFP4, MXFP8): E8M0 scales, a group of 32 and Quark's scale mode by default."""

    def build(self, cls: type[Any], options: Options) -> Any:
        return cls(
            options.group_size or 32, options.scale_dtype or "U8", options.scale_mode or "even"
        )
