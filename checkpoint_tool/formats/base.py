"""The ``Format`` protocol: everything ckpt knows about one storage format, in one object.

A format is a class with a few class attributes and a few methods, instantiated once and
registered (``formats.registry``). The rest of ckpt asks ``format_of(scheme)`` instead of
switching on ``WeightFormat`` members:

- **what it stores** (no torch): ``storage_class`` (roles, dtypes and the per-dim ``Axis``
  table of ``formats.storage``: shapes, slice regions, pads, alignment), ``weight_pack`` and
  ``packed_dtypes`` (FP4: two values per ``U8``/``I8`` byte), ``scale_block`` (what one scale
  covers), ``byte_scale_encoding`` (how a scale stored as bytes decodes);
- **how it slices under TP / FSE**: ``alignment`` (from the storage table),
  ``splits_scales`` (whether its scales cut into shared-expert chunks);
- **encode / decode**: ``codec_path`` names the ``quant.codecs`` class, imported on first use
  (torch is imported then, never before);
- **how the runtime runs it**: ``kernel`` (the grouped GEMM's ``KernelFormat`` member name,
  None when the runtime cannot run it) and ``w8a8`` (activations quantized too); the verify
  tolerance follows from ``runs_w8a8``;
- **how synth writes it**: ``synth_parts`` (tensors written besides weight and scale) and
  ``shares_global_scale`` (gate/up of one MLP share them);
- **how vLLM names its scale**: ``scale_param``.

Deliberately NOT here: vLLM's own reading of formats (``policy/engine/``: the engine's view,
which must follow vLLM's source, not ckpt's) and ``verify/expected.py`` (the independent
verifier, which must not share ckpt's format code to catch its bugs).

Example (MXFP4)::

    fmt = format_of(scheme)                 # scheme.format == WeightFormat.MXFP4
    fmt.name, fmt.weight_pack, fmt.kernel   # ('mxfp4', 2, 'MXFP4')
    fmt.storage_for(scheme).storage_shapes((4, 64))   # {'weight': (4, 32), 'scale': (4, 2)}
    fmt.codec_for(scheme).dequantize(parts)           # imports torch here
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.formats.storage import Shape, StorageFormat

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme

#: one extra tensor synth writes for a format: (role, suffix, dtype, shape kind), e.g.
#: NVFP4's ("global_scale", "weight_scale_2", "F32", "scalar")
SynthPart = tuple[str, str, str, str]


@dataclass(frozen=True)
class Options:
    """What picks one instance of a format's storage or codec class; None: the format's default.

    Example: ``Options(block=(128, 128), scale_dtype="F32")`` for DeepSeek-V3 block FP8.
    """

    block: tuple[int, int] | None = None
    group_size: int | None = None
    scale_dtype: str | None = None
    scale_is_e8m0: bool = False
    weight_dtype: str | None = None
    scale_mode: str | None = None
    #: INT4: no zero points stored (compressed-tensors ``symmetric: true``)
    symmetric: bool = True
    #: NVFP4: the global scale divides (compressed-tensors ``weight_global_scale``)
    global_scale_divides: bool = False

    @classmethod
    def of(cls, scheme: Scheme) -> Options:
        """The options a resolved ``scheme`` stores with."""
        return cls(
            block=scheme.block,
            group_size=scheme.group_size,
            scale_dtype=_first(scheme.scale_dtypes),
            scale_is_e8m0=scheme.scale_is_e8m0,
            weight_dtype=_first(scheme.weight_dtypes) if not scheme.quantized else None,
            scale_mode=_scale_mode(scheme.spec),
            symmetric=scheme.zero_point_suffix is None,
            global_scale_divides=scheme.global_scale_divides,
        )


OPTION_NAMES = tuple(f.name for f in fields(Options))


class Format:
    """One storage format. Subclass, set the class attributes, implement ``build``, register.

    Class attributes a format sets (defaults suit an unpacked, weight-only format):
    """

    #: the ``Scheme.format`` member this format answers for
    member: ClassVar[WeightFormat]
    #: the torch-free storage class (subclass of ``formats.storage.StorageFormat``); None when
    #: ckpt cannot describe the storage (``unsupported``)
    storage_class: ClassVar[type[StorageFormat] | None] = None
    #: ``"module:Class"`` of the codec (quantize / dequantize / slice / pad real tensors);
    #: imported on first use
    codec_path: ClassVar[str] = ""
    #: weight dtypes that hold ``weight_pack`` values per element (an ``F4`` header is logical)
    packed_dtypes: ClassVar[tuple[str, ...]] = ()
    #: how a scale role stored as ``U8``/``I8`` bytes decodes, where not E8M0 (NVFP4: E4M3)
    byte_scales: ClassVar[dict[str, str]] = {}
    #: whether the scales split into chunks along the experts' dims (FSE shared-expert chunks):
    #: False for a 0-d per-matrix scale, and for per-channel (down's scale is per output row)
    splits_scales: ClassVar[bool] = True
    #: the runtime's ``KernelFormat`` member name, None when the runtime cannot run it
    kernel: ClassVar[str | None] = None
    #: whether the runtime may quantize the activations too (W8A8), see ``runs_w8a8``
    w8a8: ClassVar[bool] = False
    #: whether a shared expert stored this way can be requantized to MXFP4 (read as a source)
    requantizable: ClassVar[bool] = False
    #: tensors synth writes besides the weight, its scale and an input scale
    synth_parts: ClassVar[tuple[SynthPart, ...]] = ()
    #: whether gate and up of one MLP share the ``synth_parts`` (NVFP4's global scale)
    shares_global_scale: ClassVar[bool] = False

    # ---- identity --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The config / plan spelling, e.g. ``"mxfp4"``."""
        return self.member.value

    @property
    def quantized(self) -> bool:
        return self.member is not WeightFormat.UNQUANTIZED

    @property
    def weight_pack(self) -> int:
        """Logical values per stored weight element along the input (last) dim (FP4: 2), as
        the storage class says."""
        return self.storage_class.weight_pack if self.storage_class is not None else 1

    @property
    def decodable(self) -> bool:
        """Whether ckpt has a codec for it (False: tensors are copied, never decoded)."""
        return self.storage_class is not None

    def __repr__(self) -> str:
        return f"<format {self.name}>"

    # ---- what it stores (no torch) -----------------------------------------------------------
    def build(self, cls: type[Any], options: Options) -> Any:
        """An instance of ``cls`` (the storage or codec class) for ``options``, defaults filled."""
        raise NotImplementedError(f"{self.name}: build")

    def storage(self, **options: Any) -> StorageFormat:
        """The storage description for ``options`` (``Options`` fields, None: default)."""
        return self.build(self._storage_class(), Options(**options))

    def storage_for(self, scheme: Scheme) -> StorageFormat:
        """What weights stored per ``scheme`` look like: dtypes, shapes, regions, pads."""
        return self.build(self._storage_class(scheme), Options.of(scheme))

    def alignment(self, scheme: Scheme, dim: int) -> int:
        """Logical granularity of slices of ``dim`` (-2 rows, -1 columns), from the geometry
        alone (dtypes do not change it); 1 for a format ckpt cannot describe.

        Example: MXFP4/32 -> -1: 32, -2: 1; fp8_block[128,64] -> -2: 128, -1: 64.
        """
        if self.storage_class is None:
            return 1
        storage = self.storage(block=scheme.block, group_size=scheme.group_size)
        return storage.alignment(dim, (1, 1))

    def logical_shape(self, dtype: str, shape: Shape) -> Shape:
        """Unpacked ``[..., out, in]`` of a weight stored as ``dtype`` ``shape``.

        Example: MXFP4 ``("U8", (192, 64))`` -> ``(192, 128)``; ``("F4", (192, 128))`` as is.
        """
        if self.weight_pack > 1 and dtype in self.packed_dtypes and shape:
            return (*shape[:-1], shape[-1] * self.weight_pack)
        return tuple(shape)

    def scale_block(self, scheme: Scheme) -> tuple[int | None, int | None]:
        """Logical ``(rows, cols)`` one scale element covers; None: the whole dim.

        Example: fp8_per_channel -> ``(1, None)``; mxfp4/32 -> ``(1, 32)``.
        """
        return (None, None)

    def byte_scale_encoding(self, role: str) -> str:
        """``"e8m0"`` or ``"e4m3"``: what a ``role`` tensor stored as ``U8``/``I8`` holds."""
        return self.byte_scales.get(role, "e8m0")

    def short(self, scheme: Scheme) -> str:
        """Compact label for tables, e.g. ``fp8_block[128,128]`` or ``mxfp4/32``."""
        return self.name

    # ---- encode / decode (torch on first use) -------------------------------------------------
    @property
    def codec_class(self) -> type[Any]:
        """The codec class, imported now (this imports torch)."""
        if not self.codec_path:
            raise InputError(f"no codec for weight format '{self.name}' (ckpt cannot decode it)")
        module, _, cls = self.codec_path.partition(":")
        return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]

    def codec(self, **options: Any) -> Any:
        """A ``quant.codecs`` codec for ``options`` (``Options`` fields, None: default)."""
        self._storage_class()
        return self.build(self.codec_class, Options(**options))

    def codec_for(self, scheme: Scheme) -> Any:
        """The codec that reads and writes weights stored per ``scheme``."""
        self._storage_class(scheme)
        return self.build(self.codec_class, Options.of(scheme))

    # ---- runtime, verify, names ---------------------------------------------------------------
    def runs_w8a8(self, scheme: Scheme, w8a8: bool | None = None) -> bool:
        """Whether the runtime quantizes ``scheme``'s activations too (the tighter tolerance of
        ``verify.tolerance`` follows). ``w8a8=None`` follows the scheme, True/False force it
        where the format allows it."""
        if not self.w8a8:
            return False
        return scheme.activation == "dynamic" if w8a8 is None else bool(w8a8)

    def scale_param(self, scheme: Scheme) -> str | None:
        """The scale parameter vLLM registers for ``scheme`` (None: no weight scale)."""
        return "weight_scale" if self.quantized and self.decodable else None

    def sharded_note(self, per_rank_rows: int) -> str | None:
        """A plan note for routed experts padded per rank (``vllm_sharded``), or None."""
        return None

    # ---- helpers -----------------------------------------------------------------------------
    def _storage_class(self, scheme: Scheme | None = None) -> type[StorageFormat]:
        if self.storage_class is None:
            if scheme is not None:
                raise InputError(
                    f"no codec for this quantization scheme (rule: {scheme.rule or 'unknown'}); "
                    "ckpt can copy such tensors but not decode them"
                )
            raise InputError(f"no codec for weight format '{self.name}' (ckpt cannot decode it)")
        return self.storage_class


def _first(dtypes: tuple[str, ...]) -> str | None:
    return dtypes[0] if dtypes else None


def _scale_mode(spec: Any) -> str | None:
    """Quark ``scale_calculation_mode`` of the weight spec, if the producer recorded one."""
    if isinstance(spec, dict):
        weight = spec.get("weight", spec)
        for cfg in weight if isinstance(weight, list) else [weight]:
            if isinstance(cfg, dict) and cfg.get("scale_calculation_mode") in ("even", "floor"):
                return str(cfg["scale_calculation_mode"])
    return None
