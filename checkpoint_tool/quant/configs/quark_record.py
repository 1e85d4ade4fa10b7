"""Quark quant specs read once: the typed record that every reader of a Quark spec reads.

A Quark layer spec has four slots, ``weight``, ``input_tensors``, ``output_tensors`` and
``bias``; each is null, one tensor config, or a list of them (Quark 0.13 writes two-element
lists: NVFP4 ``[fp4 per_group 16, fp8_e4m3 per_tensor]``, W4A8 ``[fp8_e4m3 per_tensor, int4
per_channel]``). This module is the only place that knows those key names, the tensor-config
keys and how their values are typed; the readers are ``quark_spec.scheme_from_spec`` (the ckpt
``Scheme``: what the files hold), ``policy.engine.quark_detect`` (what vLLM builds) and
``policy.fse_gates`` (vLLM's DeepSeek-V4 MXFP4 test). They compare values, spelled as Quark
spells them (``"fp8_e4m3"``, ``"per_group"``, ``"e8m0"``), never the dict.

Reading rules: a value of the wrong type reads as absent (specs loaded through
``QuarkTensorSpec`` are typed already), an integral float as its int; ``block_size`` becomes a
tuple (an int ``b`` is the square block ``(b, b)``); a slot entry that is not a mapping reads as
a tensor config with nothing set; a list slot stays a list (``QuarkSlot.listed``), because
readers treat ``[x]`` and ``x`` differently.

Example::

    QuarkLayer.parse({"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                                 "scale_format": "e8m0", "is_dynamic": False},
                      "input_tensors": None, "output_tensors": None, "bias": None})
    # QuarkLayer(weight=QuarkSlot(parts=(QuarkTensor(dtype='fp4', qscheme='per_group',
    #     group_size=32, block=None, scale_format='e8m0', scale_type=None, is_dynamic=False,
    #     symmetric=None, ch_axis=None),), listed=False), input=None, output_or_bias=())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the layer-spec slots vLLM refuses when quantized (``output_tensors`` / ``bias``)
EXTRA_SLOTS = ("output_tensors", "bias")


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _block(v: Any) -> tuple[int, ...] | None:
    """``[128, 128]`` -> ``(128, 128)``; ``128`` -> ``(128, 128)``; anything else -> None."""
    if isinstance(v, list | tuple):
        return tuple(v)
    if _int(v):
        return (_int(v), _int(v))  # type: ignore[return-value]
    return None


@dataclass(frozen=True)
class QuarkTensor:
    """One tensor config (``weight``, ``input_tensors``, ... or one entry of their list).

    Example: ``QuarkTensor(dtype="fp8_e4m3", qscheme="per_block", block=(128, 128),
    scale_type="float32", is_dynamic=False, symmetric=True)``.
    """

    dtype: str | None = None
    qscheme: str | None = None
    group_size: int | None = None
    #: ``block_size`` as (rows, cols), e.g. (128, 128); None when not written
    block: tuple[int, ...] | None = None
    #: how scales are stored, e.g. "e8m0" (OCP MX), "float32" (NVFP4)
    scale_format: str | None = None
    #: the scale dtype, e.g. "float", "float32", "float8_e8m0fnu"
    scale_type: str | None = None
    #: None when not written: vLLM reads that as static (``not is_dynamic``), ckpt expects no
    #: activation scale tensor unless it is written False
    is_dynamic: bool | None = None
    symmetric: bool | None = None
    ch_axis: int | None = None

    @classmethod
    def parse(cls, raw: Any) -> QuarkTensor:
        """Read one tensor-config dict (anything else reads as nothing set)."""
        d = raw if isinstance(raw, Mapping) else {}
        return cls(
            dtype=_str(d.get("dtype")),
            qscheme=_str(d.get("qscheme")),
            group_size=_int(d.get("group_size")),
            block=_block(d.get("block_size")),
            scale_format=_str(d.get("scale_format")),
            scale_type=_str(d.get("scale_type")),
            is_dynamic=_bool(d.get("is_dynamic")),
            symmetric=_bool(d.get("symmetric")),
            ch_axis=_int(d.get("ch_axis")),
        )

    def text(self) -> str:
        """Compact text, e.g. ``fp8_e4m3/per_block [128, 128]/static``."""
        scheme = str(self.qscheme)
        if self.group_size:
            scheme += f" {self.group_size}"
        if self.block:
            scheme += f" {list(self.block)}"
        return "/".join([str(self.dtype), scheme, "dynamic" if self.is_dynamic else "static"])


@dataclass(frozen=True)
class QuarkSlot:
    """A non-null slot: its tensor configs, and whether they were written as a list.

    Example: NVFP4's weight ``QuarkSlot(parts=(QuarkTensor(dtype="fp4", ...),
    QuarkTensor(dtype="fp8_e4m3", ...)), listed=True)``.
    """

    parts: tuple[QuarkTensor, ...]
    listed: bool = False

    @classmethod
    def parse(cls, raw: Any) -> QuarkSlot | None:
        """Read a slot value: null -> None, a list -> each entry, anything else -> one entry."""
        if raw is None:
            return None
        if isinstance(raw, list):
            return cls(tuple(QuarkTensor.parse(x) for x in raw), listed=True)
        return cls((QuarkTensor.parse(raw),))

    @property
    def multi(self) -> bool:
        """More than one tensor config (a two-element list)."""
        return len(self.parts) > 1

    @property
    def one(self) -> QuarkTensor | None:
        """The tensor config of a one-entry slot, written as a dict or as a list of one."""
        return self.parts[0] if len(self.parts) == 1 else None

    @property
    def plain(self) -> QuarkTensor | None:
        """The tensor config when written as one dict (None for any list)."""
        return None if self.listed else self.parts[0]

    @property
    def first(self) -> QuarkTensor | None:
        """The first tensor config (None for an empty list)."""
        return self.parts[0] if self.parts else None

    def text(self) -> str:
        """``fp4/per_group 32/static`` or ``[fp4/per_group 16/static, ...]`` for a list."""
        if not self.listed:
            return self.parts[0].text()
        return "[" + ", ".join(t.text() for t in self.parts) + "]"


@dataclass(frozen=True)
class QuarkLayer:
    """One layer spec (a ``layer_quant_config`` entry or the global one), read.

    Example: ``QuarkLayer(weight=QuarkSlot(...), input=None, output_or_bias=("bias",))``.
    """

    weight: QuarkSlot | None
    input: QuarkSlot | None
    #: which of ``output_tensors`` / ``bias`` are quantized (written non-empty)
    output_or_bias: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> QuarkLayer:
        """Read a layer-spec dict (e.g. ``QuarkLayerSpec.raw()`` or config.json's own)."""
        d = raw if isinstance(raw, Mapping) else {}
        return cls(
            weight=QuarkSlot.parse(d.get("weight")),
            input=QuarkSlot.parse(d.get("input_tensors")),
            output_or_bias=tuple(k for k in EXTRA_SLOTS if d.get(k)),
        )

    def text(self) -> str:
        """``weight fp4/per_group 32/static, input fp4/per_group 32/dynamic``."""
        w = self.weight.text() if self.weight else "none"
        i = self.input.text() if self.input else "none"
        return f"weight {w}, input {i}"
