"""Deterministic, validly encoded bytes for each ``TensorSpec``.

Every tensor draws from its own ``torch.Generator`` seeded by ``sha256(seed, key)``, so the
bytes depend only on the seed and the tensor (not on generation order or sharding). Float
weights are N(0, 0.02) and go through the project's codecs (``checkpoint_tool.quant.codecs``):
scales are what the codec computes (E8M0 never 255, FP8 never NaN). Quantized modules are
cached briefly because a weight and its scales are written one after another (possibly in
different shards).

Example::

    gen = DataGenerator(seed=0)
    raw = gen.tensor_bytes(spec)   # bytes of exactly tensor_nbytes(spec.dtype, spec.shape)
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import OrderedDict

import torch

from checkpoint_tool.errors import UsageError
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.synth.encodings import ENCODINGS
from checkpoint_tool.synth.layout import QuantPart, RandomPlain, TensorSpec

WEIGHT_STD = 0.02
_FLOAT_TORCH = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_INT_TORCH = {"I64": torch.int64, "I32": torch.int32}
_BYTE_DTYPES = {"U8", "I8", "F8_E4M3", "F8_E8M0"}


def derive_seed(seed: int, key: str) -> int:
    """A 63-bit seed from the user seed and a key (tensor or module name)."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, key: str) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(derive_seed(seed, key))
    return g


def to_bytes(t: torch.Tensor, dtype: str) -> bytes:
    """Little-endian bytes of ``t`` stored as safetensors ``dtype``.

    Byte-typed results of the codecs (FP8, packed FP4, E8M0 in uint8 or float8_e8m0fnu) are
    reinterpreted, never cast numerically; float tensors are cast to the float dtype.
    """
    t = t.contiguous().reshape(-1)
    if dtype in _BYTE_DTYPES:
        if t.element_size() != 1:
            raise ValueError(f"cannot store a {t.dtype} tensor as {dtype} bytes")
        return t.view(torch.uint8).numpy().tobytes()
    if dtype in _FLOAT_TORCH:
        return t.to(_FLOAT_TORCH[dtype]).view(torch.uint8).numpy().tobytes()
    if dtype in _INT_TORCH:
        return t.to(_INT_TORCH[dtype]).view(torch.uint8).numpy().tobytes()
    raise ValueError(f"unsupported synth dtype {dtype}")


#: data modes: "quantize" draws N(0, 0.02) floats and quantizes them with the codecs;
#: "codes" draws valid storage codes directly (any FP4 nibble, FP8 bytes but the NaN codes,
#: E8M0 scales 2**-9..2**-3, positive float scales): ~50x faster, for large benchmark data
DATA_MODES = ("quantize", "codes")


class DataGenerator:
    """Makes the bytes of tensor specs for one seed."""

    def __init__(self, seed: int = 0, cache_modules: int = 8, mode: str = "quantize") -> None:
        if mode not in DATA_MODES:
            raise UsageError(f"--data {mode!r}: choose one of {', '.join(DATA_MODES)}")
        self.seed = seed
        self.mode = mode
        self._cache: OrderedDict[tuple, list[dict[str, torch.Tensor]]] = OrderedDict()
        self._cache_size = cache_modules

    def tensor_bytes(self, spec: TensorSpec) -> bytes:
        src = spec.source
        if isinstance(src, RandomPlain):
            return to_bytes(self._plain(spec, src), spec.dtype)
        if src.role == "input_scale":
            return to_bytes(self._input_scale(src.input_scale_key), spec.dtype)
        if src.role == "shape":  # compressed-tensors weight_shape: the logical [out, in]
            return to_bytes(torch.tensor([src.rows[src.member], src.inp]), spec.dtype)
        if self.mode == "codes" and ENCODINGS[src.encoding].quantized:
            return to_bytes(self._codes(spec, src), spec.dtype)
        parts = self._quantized_group(src)[src.member]
        t = parts[src.role]
        if t.numel() == math.prod(spec.shape):
            # gpt-oss: [E * R, C/2] laid out [E, R, C/32, 16]; [out] vs [out, 1], [] vs [1]
            t = t.reshape(spec.shape)
        if tuple(t.shape) != tuple(spec.shape):
            raise ValueError(
                f"{spec.name}: codec produced shape {tuple(t.shape)}, layout says {spec.shape}"
            )
        return to_bytes(t, spec.dtype)

    def _plain(self, spec: TensorSpec, src: RandomPlain) -> torch.Tensor:
        g = generator(self.seed, spec.name)
        shape = spec.shape
        if src.init == "index":
            return torch.randint(0, max(src.high, 1), shape, generator=g, dtype=torch.int64)
        x = torch.randn(shape, generator=g, dtype=torch.float32)
        if src.init == "norm":
            return 1.0 + 0.05 * x
        if src.init == "bias":
            return 0.01 * x
        if src.init == "small":
            return 0.1 * x
        return WEIGHT_STD * x

    def _codes(self, spec: TensorSpec, src: QuantPart) -> torch.Tensor:
        """Valid storage codes drawn directly (``mode="codes"``); gate/up share global scales."""
        key = f"global:{'|'.join(src.group)}" if src.role == "global_scale" else spec.name
        g = generator(self.seed, f"codes:{key}")
        shape, dtype = spec.shape, spec.dtype
        if src.role == "weight":
            if dtype == "F8_E4M3":  # magnitude codes 0..0x7E, random sign: never 0x7F / 0xFF
                mag = torch.randint(0, 0x7F, shape, generator=g, dtype=torch.uint8)
                sign = torch.randint(0, 2, shape, generator=g, dtype=torch.uint8) << 7
                return mag | sign
            return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        if dtype in ("U8", "F8_E8M0"):
            return torch.randint(118, 125, shape, generator=g, dtype=torch.uint8)
        if dtype == "F8_E4M3":  # positive normal E4M3 scales 2**-4 .. 1.0
            return torch.randint(0x18, 0x39, shape, generator=g, dtype=torch.uint8)
        return (0.5 + torch.rand(shape, generator=g)) * (WEIGHT_STD / 448.0)

    def _input_scale(self, key: str) -> torch.Tensor:
        """A static activation scale: amax / 448 for an activation amax in [1, 9)."""
        g = generator(self.seed, f"input_scale:{key}")
        amax = 1.0 + 8.0 * torch.rand((), generator=g, dtype=torch.float32)
        return amax / 448.0

    def _quantized_group(self, src: QuantPart) -> list[dict[str, torch.Tensor]]:
        batch = src.batch or (src.group,)
        key = (batch, src.encoding)
        hit = self._cache.get(key)
        if hit is None:
            floats = [
                [
                    WEIGHT_STD
                    * torch.randn((rows, src.inp), generator=generator(self.seed, module))
                    for module, rows in zip(group, src.rows, strict=True)
                ]
                for group in batch
            ]
            hit = _quantize_batch(src.encoding, floats)
            self._cache[key] = hit
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return hit[src.batch_index]


def _quantize_batch(
    encoding: str, batch: list[list[torch.Tensor]]
) -> list[list[dict[str, torch.Tensor]]]:
    """Quantize groups (members stacked on rows) as one batch; split back per group, member."""
    enc = ENCODINGS[encoding]
    if not enc.quantized:
        return [[{"weight": w} for w in group] for group in batch]
    codec = codec_for_format(
        enc.format,
        block=enc.block,
        group_size=enc.group_size,
        scale_dtype=enc.scale_dtype,
        **dict(enc.codec_options),  # type: ignore[arg-type]
    )
    bounds = [0, *itertools.accumulate(w.shape[0] for w in batch[0])]
    rows = bounds[-1]
    logical = (rows, batch[0][0].shape[-1])
    if any(b % codec.alignment(-2, logical) for b in bounds[1:-1]):
        # members cannot share scale blocks (e.g. FP8 128-row blocks across gate|up): quantize
        # each member on its own, still batched over the groups
        per_member = [
            codec.quantize(torch.stack([group[i] for group in batch])) for i in range(len(batch[0]))
        ]
        return [
            [{role: t[b] for role, t in parts.items()} for parts in per_member]
            for b in range(len(batch))
        ]
    stacked = torch.stack([torch.cat(group, dim=0) for group in batch])
    parts = codec.quantize(stacked)
    out: list[list[dict[str, torch.Tensor]]] = []
    for b, group in enumerate(batch):
        # codec.slice maps weight rows to scale rows (128-row FP8 blocks, per-row MX/NV scales)
        parts_b = {role: t[b] for role, t in parts.items()}
        out.append([codec.slice(parts_b, -2, bounds[i], bounds[i + 1]) for i in range(len(group))])
    return out
