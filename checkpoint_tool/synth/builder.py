"""Write a synthetic checkpoint folder: shards, index, config.json, side files.

Memory is bounded: tensors are generated and written one at a time through the atomic
``SafetensorsWriter``. ``sparse=True`` writes each shard's header and then extends the file to
its full size with ``truncate``: the data region is a hole (reads as zeros), no data is
generated, and a full-size DeepSeek-R1 layout (163 shards, ~92k tensors) takes seconds.

Example::

    synth_checkpoint("quark-hybrid", Path("hybrid"), seed=0)
    # hybrid/:     config.json, generation_config.json, model-00001-of-000003.safetensors, ...,
    #              model.safetensors.index.json, tokenizer_config.json
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypedDict

import torch

from checkpoint_tool.catalog.safetensors_format import build_header
from checkpoint_tool.errors import OutputError, UsageError
from checkpoint_tool.execute.writer import (
    SafetensorsWriter,
    partial_name,
    write_bytes_atomic,
)
from checkpoint_tool.synth.data import DataGenerator
from checkpoint_tool.synth.dims import MLA_GEOMETRIES, Dims, with_overrides
from checkpoint_tool.synth.layout import SynthLayout, TensorSpec
from checkpoint_tool.synth.presets import PRESETS
from checkpoint_tool.synth.presets.base import PresetOptions, PresetSpec
from checkpoint_tool.synth.shards import shard_name, spec_nbytes, split_balanced, split_greedy
from checkpoint_tool.synth.sidefiles import side_files

if TYPE_CHECKING:
    from typing_extensions import Unpack

INDEX_NAME = "model.safetensors.index.json"
#: shard budget of tiny checkpoints: small enough that every preset has several shards
DEFAULT_SHARD_SIZE = 1 << 20
#: shard budget when the tensors add up to more than BIG_OUTPUT bytes
BIG_SHARD_SIZE = 500 * 10**6
BIG_OUTPUT = 64 << 20
SHARD_METADATA = {"format": "pt"}

#: (bytes done, bytes total, current file) -> None
Progress = Callable[[int, int, str], None]


def get_preset(name: str) -> PresetSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(
            f"unknown preset {name!r}; `ckpt synth --list` shows the presets "
            f"({', '.join(sorted(PRESETS))})"
        ) from None


class SizeOverrides(TypedDict, total=False):
    """The user's sizes (``dims.OVERRIDES``), DeepSeek-V3 ``mla`` geometry and DeepSeek-V4
    ``engram`` tables (False: V4-Flash as published, without the V4.1 engram); None keeps the
    preset's, e.g. ``{"n_routed": 4, "num_layers": 2, "mla": "quark-fixture"}``."""

    num_layers: int | None
    n_routed: int | None
    n_shared: int | None
    hidden: int | None
    moe_intermediate: int | None
    mla: str | None
    engram: bool | None


class WriteOptions(TypedDict, total=False):
    """``write_layout``'s options besides ``sparse`` (defaults there), e.g. ``{"seed": 3}``."""

    seed: int
    shard_size: int | None
    shards: int | None
    overwrite: bool
    data: str
    progress: Progress | None


class SynthOptions(SizeOverrides, WriteOptions, total=False):
    """Every option of ``synth_checkpoint`` besides ``sparse`` and ``fused_experts``."""


def resolve_dims(
    spec: PresetSpec, *, sparse: bool = False, **overrides: Unpack[SizeOverrides]
) -> Dims:
    """The preset's tiny dims (full real sizes with ``sparse``) with the user's overrides.

    ``mla`` (DeepSeek-V3 tiny presets): ``"vllm"`` (the default: a geometry vLLM loads) or
    ``"quark-fixture"`` (the MLA sizes of the Quark producer fixtures)."""
    mla = overrides.pop("mla", None)
    engram = overrides.pop("engram", None)
    dims = with_overrides(spec.full if sparse else spec.tiny, **overrides)
    if engram is not None:
        if spec.family != "deepseek_v4":
            raise UsageError("engram= applies to the DeepSeek-V4 presets only")
        if not engram:
            dims = dims.model_copy(update={"engram_layers": ()})
    if mla is not None:
        if mla not in MLA_GEOMETRIES:
            raise UsageError(f"mla {mla!r}: choose one of {sorted(MLA_GEOMETRIES)}")
        if spec.family != "deepseek_v3" or sparse:
            raise UsageError("mla= applies to the tiny DeepSeek-V3 presets only")
        dims = dims.model_copy(update=MLA_GEOMETRIES[mla])
    if dims.top_k > dims.n_routed:
        dims = dims.model_copy(update={"top_k": dims.n_routed})
    if dims.first_dense >= dims.num_layers and spec.family == "deepseek_v3":
        dims = dims.model_copy(update={"first_dense": max(0, dims.num_layers - 1)})
    return dims


def build_layout(
    preset: str,
    *,
    sparse: bool = False,
    fused_experts: bool = False,
    **overrides: Unpack[SizeOverrides],
) -> SynthLayout:
    """The layout (config + tensor specs) a call to ``synth_checkpoint`` would write."""
    spec = get_preset(preset)
    if fused_experts and not spec.supports_fused_experts:
        raise UsageError(
            f"preset {preset!r} has no fused-experts variant; it applies to Quark presets on "
            "the DeepSeek-V3 architecture"
        )
    dims = resolve_dims(spec, sparse=sparse, **overrides)
    layout = spec.build(dims, PresetOptions(fused_experts=fused_experts))
    layout.family = spec.family
    return layout


def synth_checkpoint(
    preset: str,
    dst: Path,
    *,
    sparse: bool = False,
    fused_experts: bool = False,
    **options: Unpack[SynthOptions],
) -> Path:
    """Write checkpoint ``preset`` into folder ``dst`` and return ``dst``: ``build_layout`` with
    the size overrides among ``options``, then ``write_layout`` with the others.

    ``shard_size`` (bytes) splits greedily; ``shards`` splits into that many shards balanced
    by bytes; neither: full-size layouts use the real shard count, tiny ones 1 MiB shards
    (500 MB shards once the tensors exceed 64 MiB).
    ``data="codes"`` draws valid storage codes directly instead of quantizing floats (fast,
    for large benchmark checkpoints; see ``synth.data.DATA_MODES``).
    """
    sizes = {k: options.pop(k) for k in list(options) if k in SizeOverrides.__optional_keys__}
    layout = build_layout(preset, sparse=sparse, fused_experts=fused_experts, **sizes)
    write_layout(layout, Path(dst), sparse=sparse, **options)
    return Path(dst)


class WriteSummary(NamedTuple):
    """What ``write_layout`` wrote."""

    path: Path
    shards: int
    tensors: int
    tensor_bytes: int


def write_layout(
    layout: SynthLayout,
    dst: Path,
    *,
    seed: int = 0,
    shard_size: int | None = None,
    shards: int | None = None,
    sparse: bool = False,
    overwrite: bool = False,
    data: str = "quantize",
    progress: Progress | None = None,
) -> WriteSummary:
    """Write a built layout into ``dst`` (see ``synth_checkpoint`` for the options)."""
    with _one_torch_thread():
        gen = DataGenerator(seed, mode=data)
        groups = _split(layout, shard_size=shard_size, shards=shards, sparse=sparse)
        dst = Path(dst)
        _prepare_dst(dst, overwrite)
        total = sum(spec_nbytes(s) for s in layout.tensors)
        weight_map: dict[str, str] = {}
        file_bytes = 0
        done = 0
        n = len(groups)
        for k, group in enumerate(groups, start=1):
            name = shard_name(k, n, max(5, layout.shard_digits_total))
            ordered = sorted(group, key=lambda s: s.name)
            path = dst / name
            if sparse:
                _write_sparse(path, ordered)
                done += sum(spec_nbytes(s) for s in group)
                if progress:
                    progress(done, total, name)
            else:
                with SafetensorsWriter(
                    path, [(s.name, s.dtype, tuple(s.shape)) for s in ordered], SHARD_METADATA
                ) as writer:
                    for s in ordered:
                        writer.write(s.name, gen.tensor_bytes(s))
                        done += spec_nbytes(s)
                        if progress:
                            progress(done, total, name)
            file_bytes += path.stat().st_size
            for s in group:
                weight_map[s.name] = name
        total_size = file_bytes if layout.index_total_size == "files" else total
        index = {
            "metadata": {"total_size": total_size},
            "weight_map": dict(sorted(weight_map.items())),
        }
        _write_json(dst / INDEX_NAME, index)
        _write_json(dst / "config.json", layout.config)
        for fname, content in {**layout.extra_files, **side_files(layout.family)}.items():
            _write_json(dst / fname, content)
        return WriteSummary(dst, n, len(layout.tensors), total)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch on one thread: synth tensors are small, and on a shared machine intra-op
    threads cost more than they give (3-4x slower with two threads on two busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _split(
    layout: SynthLayout, *, shard_size: int | None, shards: int | None, sparse: bool
) -> list[list[TensorSpec]]:
    if shard_size is not None and shards is not None:
        raise UsageError("give either --shard-size or --shards, not both")
    if shard_size is not None:
        if shard_size < 1:
            raise UsageError(f"--shard-size {shard_size}: must be a positive number of bytes")
        return split_greedy(layout.tensors, shard_size)
    if shards is not None:
        if shards < 1:
            raise UsageError(f"--shards {shards}: must be at least 1")
        return split_balanced(layout.tensors, shards)
    if sparse and layout.default_shards:
        return split_balanced(layout.tensors, layout.default_shards)
    total = sum(s.nbytes for s in layout.tensors)
    return split_greedy(
        layout.tensors, BIG_SHARD_SIZE if total > BIG_OUTPUT else DEFAULT_SHARD_SIZE
    )


#: files synth writes; --overwrite removes these (and nothing else) before writing
_OWNED_SUFFIXES = (".safetensors", ".safetensors.partial")
_OWNED_NAMES = {
    INDEX_NAME,
    "config.json",
    "hf_quant_config.json",
    "tokenizer_config.json",
    "generation_config.json",
}


def _prepare_dst(dst: Path, overwrite: bool) -> None:
    """Make DST ready: refuse a non-empty folder unless ``overwrite``, and even then replace only
    a folder that holds nothing but what synth writes (shards, index, its JSON side files), so
    ``--overwrite`` on a real checkpoint (README, tokenizer, a subfolder) is refused, not emptied.
    """
    if dst.exists() and not dst.is_dir():
        raise OutputError(f"{dst}: exists and is not a folder; choose another destination")
    if dst.exists() and any(dst.iterdir()):
        if not overwrite:
            raise OutputError(
                f"{dst}: folder is not empty; pass --overwrite to replace a checkpoint there"
            )
        entries = sorted(dst.iterdir())
        foreign = [p for p in entries if not _synth_owned(p)]
        if foreign:
            raise OutputError(
                f"{foreign[0]}: not a file synth writes, so {dst} is not a synthetic checkpoint;"
                " --overwrite replaces only synth's own output, choose an empty folder"
            )
        for p in entries:
            p.unlink()
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{dst}: cannot create folder ({exc.strerror})") from exc


def _synth_owned(p: Path) -> bool:
    """Whether P is a plain file of a name synth writes, e.g. ``model-00001-of-00002.safetensors``
    or ``config.json`` (a link, a folder or ``README.md`` is not)."""
    if p.is_symlink() or not p.is_file():
        return False
    return p.name in _OWNED_NAMES or p.name.lstrip(".").endswith(_OWNED_SUFFIXES)


def _write_sparse(path: Path, specs: list[TensorSpec]) -> None:
    """Header only, then extend to the full size: the data region is a hole.

    Renamed into place like every output, but not fsynced: a sparse layout is scratch test data.
    """
    prefix, offsets = build_header(
        [(s.name, s.dtype, tuple(s.shape)) for s in specs], SHARD_METADATA
    )
    size = len(prefix) + (offsets[-1][1] if offsets else 0)
    tmp = partial_name(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(prefix)
            fh.truncate(size)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp.exists():
            tmp.unlink()
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from exc


def _write_json(path: Path, content: dict) -> None:
    write_bytes_atomic(path, (json.dumps(content, indent=2, ensure_ascii=False) + "\n").encode())
