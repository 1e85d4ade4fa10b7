"""What a weight format stores and how its storage follows a logical slice or pad (no torch).

A quantized weight is a dict of storage tensors by role: ``"weight"`` (the elements),
``"scale"`` (per tensor/channel/block/group) and, for NVFP4, ``"global_scale"``. Logical
shapes are the unpacked ``[..., out, in]``; leading dims (e.g. experts ``[E, out, in]``) are
plain batch dims.

Each format only describes, per role and logical dim, an ``Axis``: how many logical elements
one storage element covers there. Packed axes (two FP4 values per byte) divide exactly;
scale axes (groups, blocks) are ceil-shaped, so a partial last group/block is allowed.
Expected storage shapes, slice alignment, storage regions and pads follow from that table.
``inspect`` and the planner use this alone; the codecs (``quant.codecs``) add the numbers.

Example (MXFP4, logical ``[4, 64]``)::

    fmt.storage_shapes((4, 64))              # {'weight': (4, 32), 'scale': (4, 2)}
    fmt.storage_regions((4, 64), -1, 32, 64)
    # {'weight': Region(dim=1, start=16, stop=32), 'scale': Region(dim=1, start=1, stop=2)}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.formats.dtypes import one_fill, zero_fill
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.regions import Pad, Region

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Axis:
    """How one logical dim maps onto one role's storage dim.

    ``unit`` logical elements per storage element; ``packed`` axes need exact multiples
    (bytes of FP4 nibbles), scale axes round up (a partial last group/block has a scale).
    """

    unit: int = 1
    packed: bool = False

    def storage_size(self, n: int) -> int:
        return n // self.unit if self.packed else -(-n // self.unit)

    def why(self, role: str) -> str:
        if self.packed:
            return f"{self.unit} values share one byte of the {role}"
        return f"one {role} element covers {self.unit}"


def round_up(n: int, unit: int) -> int:
    """``n`` rounded up to a multiple of ``unit``: ``round_up(80, 32)`` -> ``96``."""
    return -(-n // unit) * unit


def normalize_dim(dim: int, ndim: int, *, what: str = "") -> int:
    if not -ndim <= dim < ndim:
        raise InputError(f"{what}dim {dim} is out of range for a {ndim}-d tensor")
    return dim % ndim


def where(name: str | None) -> str:
    """``"tensor 'NAME': "`` to start an error message, or nothing."""
    return f"tensor '{name}': " if name else ""


def storage_shape_of(x: Any) -> Shape:
    """Shape of a tensor (anything with ``.shape``) or of a shape given as a sequence."""
    return tuple(int(d) for d in getattr(x, "shape", x))


class StorageFormat:
    """Generic shapes, alignment, regions and pads driven by ``role_ndim`` and ``axis``."""

    format: WeightFormat
    roles: tuple[str, ...] = ("weight",)
    #: logical elements per weight storage element along the last dim (FP4: 2)
    weight_pack: int = 1
    #: smallest logical rank the format accepts ([out, in])
    min_ndim: int = 2

    # ---- per-format layout (overridden) --------------------------------------------------
    @property
    def label(self) -> str:
        return self.format.value

    def storage_dtypes(self) -> dict[str, str]:
        """safetensors dtype written for each role, e.g. ``{'weight': 'U8', 'scale': 'U8'}``."""
        raise NotImplementedError

    def role_ndim(self, role: str, ndim: int) -> int:
        """Rank of ``role``'s storage for a logical rank ``ndim`` (scales may drop trailing dims)."""
        return ndim

    def axis(self, role: str, ndim: int, dim: int) -> Axis | None:
        """How logical ``dim`` (normalized) maps onto ``role``; None if role lacks that dim."""
        return Axis() if dim < self.role_ndim(role, ndim) else None

    def accepted_shapes(self, role: str, want: Shape) -> list[Shape]:
        """Storage shapes accepted for ``role`` when reading, canonical ``want`` first
        (e.g. per-channel scales ``[out]`` or ``[out, 1]``)."""
        return [want]

    # ---- shapes ---------------------------------------------------------------------------
    def check_ndim(self, shape: Shape, name: str | None = None) -> None:
        if len(shape) < self.min_ndim:
            raise InputError(
                f"{where(name)}{self.label} needs a weight of at least {self.min_ndim} dims "
                f"([..., out, in]), got shape {list(shape)}"
            )

    def logical_shape(self, parts_or_shapes: Any) -> Shape:
        """Logical ``[..., out, in]`` from the weight's storage shape (or parts dict)."""
        w = parts_or_shapes["weight"] if isinstance(parts_or_shapes, Mapping) else parts_or_shapes
        shape = storage_shape_of(w)
        if self.weight_pack != 1 and shape:
            shape = (*shape[:-1], shape[-1] * self.weight_pack)
        return shape

    def storage_shapes(self, logical_shape: Shape) -> dict[str, Shape]:
        """Expected storage shape of every role for a logical shape."""
        shape = tuple(int(d) for d in logical_shape)
        self.check_ndim(shape)
        nd = len(shape)
        out: dict[str, Shape] = {}
        for role in self.roles:
            dims = []
            for d in range(self.role_ndim(role, nd)):
                ax = self.axis(role, nd, d)
                assert ax is not None
                if ax.packed and shape[d] % ax.unit:
                    raise InputError(
                        f"{self.label}: logical size {shape[d]} on dim {d} is not a multiple of "
                        f"{ax.unit} ({ax.why(role)})"
                    )
                dims.append(ax.storage_size(shape[d]))
            out[role] = tuple(dims)
        return out

    def check_parts(self, parts: Mapping[str, Any], *, name: str | None = None) -> Shape:
        """Check every role is present with an accepted shape; return the logical shape."""
        missing = [r for r in self.roles if r not in parts]
        if missing:
            raise InputError(
                f"{where(name)}{self.label} needs {', '.join(missing)} next to the weight; "
                "the scale tensor is missing from the checkpoint"
            )
        shape = self.logical_shape(parts)
        self.check_ndim(shape, name)
        want = self.storage_shapes(shape)
        for role in self.roles:
            got = storage_shape_of(parts[role])
            if got not in self.accepted_shapes(role, want[role]):
                raise InputError(
                    f"{where(name)}{self.label} {role} has shape {list(got)}, expected "
                    f"{list(want[role])} for a weight of logical shape {list(shape)}"
                )
        return shape

    def alignment(self, dim: int, logical_shape: Shape) -> int:
        """Logical granularity of slices on ``dim`` (lcm of every role's unit there)."""
        nd = len(logical_shape)
        return _lcm_units(self._axes(nd, normalize_dim(dim, nd)))

    def _axes(self, ndim: int, dim: int) -> dict[str, Axis | None]:
        """Each role's ``Axis`` on logical ``dim`` (normalized) of a rank-``ndim`` weight."""
        return {r: self.axis(r, ndim, dim) for r in self.roles}

    def _axes_on(
        self, logical_shape: Shape, dim: int, name: str | None
    ) -> tuple[Shape, int, dict[str, Axis | None]]:
        """The checked logical shape, ``dim`` normalized, and each role's ``Axis`` on it."""
        shape = tuple(int(d) for d in logical_shape)
        self.check_ndim(shape, name)
        d = normalize_dim(dim, len(shape), what=where(name))
        return shape, d, self._axes(len(shape), d)

    # ---- plan-level ops ------------------------------------------------------------------
    def storage_regions(
        self,
        logical_shape: Shape,
        dim: int,
        start: int,
        stop: int,
        *,
        name: str | None = None,
    ) -> dict[str, Region | None]:
        """Logical ``[start, stop)`` on ``dim`` -> storage ``Region`` per role (None: unaffected).

        ``start`` and ``stop`` must be multiples of ``alignment`` (``stop`` may be the full
        size), else ``AlignmentError``.
        """
        shape, d, axes = self._axes_on(logical_shape, dim, name)
        n = shape[d]
        if not 0 <= start <= stop <= n:
            raise InputError(
                f"{where(name)}slice [{start}, {stop}) is outside dim {dim} of size {n}"
            )
        align = _lcm_units(axes)
        if start % align or (stop % align and stop != n):
            reasons = "; ".join(ax.why(r) for r, ax in axes.items() if ax and ax.unit > 1)
            raise AlignmentError(
                f"{where(name)}cannot slice {self.label} dim {dim} (size {n}) at [{start}, "
                f"{stop}): start and stop must be multiples of {align} ({reasons}); "
                f"choose a split that is a multiple of {align}"
            )
        return {
            role: None
            if ax is None
            else Region(
                dim=d,
                start=start // ax.unit,
                stop=ax.storage_size(n) if stop == n else stop // ax.unit,
            )
            for role, ax in axes.items()
        }

    def storage_pads(
        self, logical_shape: Shape, dim: int, amount: int, *, name: str | None = None
    ) -> dict[str, Pad | None]:
        """Append ``amount`` logical elements on ``dim``: zero weights, neutral (1.0) scales.

        Packed axes need whole bytes (``AlignmentError`` otherwise); scale axes grow only when
        the ceil of the group/block count grows. Roles without the dim get None.
        """
        shape, d, axes = self._axes_on(logical_shape, dim, name)
        if amount < 0:
            raise InputError(f"{where(name)}cannot pad by a negative amount ({amount})")
        n = shape[d]
        for role, ax in axes.items():
            if ax is not None and ax.packed and (amount % ax.unit or n % ax.unit):
                raise AlignmentError(
                    f"{where(name)}cannot pad {self.label} dim {dim} (size {n}) by {amount}: "
                    f"the size and the amount must be multiples of {ax.unit} ({ax.why(role)})"
                )
        dtypes = self.storage_dtypes()
        out: dict[str, Pad | None] = {}
        for role, ax in axes.items():
            grow = 0 if ax is None else ax.storage_size(n + amount) - ax.storage_size(n)
            fill = zero_fill if role == "weight" else one_fill
            out[role] = Pad(dim=d, amount=grow, fill=fill(dtypes[role])) if grow else None
        return out


def _lcm_units(axes: Mapping[str, Axis | None]) -> int:
    """lcm of the units of the roles that have the dim (1 if none has it)."""
    units = [ax.unit for ax in axes.values() if ax is not None]
    return math.lcm(*units) if units else 1
