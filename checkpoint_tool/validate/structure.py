"""Structure rules: the files, the index and the headers agree, and nothing is stale.

Each function takes the ``ValidationContext`` and returns findings (``Issue``) for its own rule.
Header faults were classified once by ``validate.scan``; the header rules only relay them for
the files a loader reads.

Example finding::

    Issue(severity="error", rule="shard_unreferenced", file="model-00003-of-00003.safetensors",
          message="shard is not referenced by model.safetensors.index.json (12 tensors) ...")
"""

from __future__ import annotations

from collections.abc import Callable

from checkpoint_tool.catalog.catalog import INDEX_NAME
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.context import Unavailable, ValidationContext


def _err(rule: str, message: str, *, file: str | None = None, tensor: str | None = None) -> Issue:
    return Issue(severity="error", rule=rule, file=file, tensor=tensor, message=message)


def _need_index(ctx: ValidationContext) -> None:
    if ctx.single_file is not None:
        raise Unavailable("a single file was given; there is no index to check")
    if not ctx.index_present:
        raise Unavailable(f"no {INDEX_NAME} (a folder of shards without an index)")


def _need_readable_index(ctx: ValidationContext) -> None:
    """``_need_index``, and the index parsed: the rules that compare against its entries."""
    _need_index(ctx)
    if not ctx.uses_index:
        raise Unavailable("the index is unreadable (see index_valid)")


def _index_problems(ctx: ValidationContext, rule: str) -> list[Issue]:
    """The index entries ``validate.context`` found faulty under ``rule``, as errors."""
    _need_index(ctx)
    return [
        _err(rule, p.message, file=INDEX_NAME, tensor=p.tensor)
        for p in ctx.index_problems
        if p.rule == rule
    ]


def _holders(ctx: ValidationContext, *, per_rank: bool = False) -> dict[tuple[str, str], list[str]]:
    """(rank, tensor) -> the counted shards that hold it, e.g. ``{("", "lm_head.weight"):
    ["model-00002-of-00002.safetensors"]}``. With ``per_rank`` (vLLM sharded state, where every
    rank holds the same names) the rank is the file name before ``-part-``, else ""."""
    out: dict[tuple[str, str], list[str]] = {}
    for rel in ctx.counted_files:
        rank = rel.rsplit("-part-", 1)[0] if per_rank else ""
        for name in ctx.scans[rel].names:
            out.setdefault((rank, name), []).append(rel)
    return out


def check_index_valid(ctx: ValidationContext) -> list[Issue]:
    """The index is JSON with a non-empty ``weight_map`` of tensor -> file name."""
    _need_index(ctx)
    if ctx.index_error:
        return [
            _err(
                "index_valid",
                f"{ctx.index_error}; loaders cannot read the index: regenerate it",
                file=INDEX_NAME,
            )
        ]
    return _index_problems(ctx, "index_valid")


def check_index_paths(ctx: ValidationContext) -> list[Issue]:
    """Every index entry is a relative path inside the checkpoint folder (no traversal)."""
    return _index_problems(ctx, "index_paths")


def check_shard_missing(ctx: ValidationContext) -> list[Issue]:
    """Every shard the index references exists (vLLM fails on listed-but-missing files)."""
    _need_index(ctx)
    out = []
    for rel in ctx.referenced:
        if rel not in ctx.scans:
            names = sorted(n for n, f in ctx.weight_map.items() if f == rel)
            out.append(
                _err(
                    "shard_missing",
                    f"shard is referenced by {INDEX_NAME} for {len(names)} tensor(s) (first "
                    f"{names[0]!r}) but does not exist; copy the missing shard or fix the index",
                    file=rel,
                )
            )
    return out


def check_shard_unreferenced(ctx: ValidationContext) -> list[Issue]:
    """No ``*.safetensors`` file beside the index that the index does not reference."""
    _need_readable_index(ctx)
    out = []
    counted = set(ctx.counted_files)
    claimed = {n for rel in counted for n in ctx.scans[rel].names}
    for rel in ctx.on_disk:
        if rel in ctx.referenced:
            continue
        names = ctx.scans[rel].names if rel in ctx.scans else set()
        shadow = len(names & claimed)
        out.append(
            _err(
                "shard_unreferenced",
                f"shard is not referenced by {INDEX_NAME} ({len(names)} tensors, {shadow} of "
                "them also in referenced shards); loaders ignore it: delete the stale shard or "
                "add it to the index",
                file=rel,
            )
        )
    return out


def _at_first_holder(
    rule: str,
    holders: dict[tuple[str, str], list[str]],
    message_of: Callable[[str, list[str]], str | None],
) -> list[Issue]:
    """One ``rule`` error per held tensor that ``message_of(name, files)`` has a message for,
    in name order, filed under the first shard that holds it (``_holders``' order)."""
    out = []
    for (_, name), files in sorted(holders.items()):
        message = message_of(name, files)
        if message is not None:
            out.append(_err(rule, message, file=files[0], tensor=name))
    return out


def _scan_problems(ctx: ValidationContext, rule: str) -> list[Issue]:
    return [p for rel in ctx.counted_files for p in ctx.scans[rel].problems if p.rule == rule]


def check_shard_truncated(ctx: ValidationContext) -> list[Issue]:
    """Each shard is as long as its header says (header and data region complete)."""
    return _scan_problems(ctx, "shard_truncated")


def check_header_valid(ctx: ValidationContext) -> list[Issue]:
    """Each header is a JSON object of well-formed entries (dtype, shape, byte ranges)."""
    return _scan_problems(ctx, "header_valid")


def check_offsets_in_range(ctx: ValidationContext) -> list[Issue]:
    """Every tensor's ``data_offsets`` lie inside its file's data region."""
    return _scan_problems(ctx, "offsets_in_range")


def check_tensor_duplicate(ctx: ValidationContext) -> list[Issue]:
    """No tensor name appears twice (within one header or across the counted shards)."""
    out = _scan_problems(ctx, "tensor_duplicate")
    # vLLM sharded state: every rank holds the same parameter names; duplicates count per rank
    # (``model-rank-1-part-0`` and ``model-rank-1-part-1`` share the rank ``model-rank-1``)
    holders = _holders(ctx, per_rank=ctx.is_sharded_state)

    def duplicated(name: str, files: list[str]) -> str | None:
        if len(files) < 2:
            return None
        kept = ctx.weight_map.get(name)
        note = f"; the index maps it to {kept}" if kept else ""
        return (
            f"tensor is stored in {len(files)} shards ({', '.join(files)}){note}; "
            "which copy a loader uses is undefined: remove the stale copy"
        )

    return out + _at_first_holder("tensor_duplicate", holders, duplicated)


def check_index_tensors(ctx: ValidationContext) -> list[Issue]:
    """Index and shards agree tensor by tensor: listed ones exist where listed, none unlisted."""
    _need_readable_index(ctx)
    out = []
    held = _holders(ctx)
    holders = {name: files for (_, name), files in held.items()}
    lost = set(ctx.lost_files)
    for name, rel in sorted(ctx.weight_map.items()):
        if rel in lost:
            continue  # reported by shard_missing / header_valid / shard_truncated
        if name in ctx.scans[rel].names:
            continue
        elsewhere = holders.get(name)
        hint = f"; it is stored in {elsewhere[0]}" if elsewhere else ""
        out.append(
            _err(
                "index_tensors",
                f"{INDEX_NAME} maps the tensor to {rel} but that shard does not hold it{hint}; "
                "regenerate the index or restore the tensor",
                file=rel,
                tensor=name,
            )
        )
    bad_entries = {p.tensor for p in ctx.index_problems}  # reported by index_valid / index_paths

    def unlisted(name: str, files: list[str]) -> str | None:
        if name in ctx.weight_map or name in bad_entries:
            return None
        return f"tensor is stored in the shard but not listed in {INDEX_NAME}; regenerate the index"

    return out + _at_first_holder("index_tensors", held, unlisted)


def check_total_size(ctx: ValidationContext) -> list[Issue]:
    """``metadata.total_size`` equals the sum of tensor bytes (file-size sums only warn)."""
    _need_readable_index(ctx)
    if ctx.lost_files:
        raise Unavailable(
            f"{len(ctx.lost_files)} referenced shard(s) are missing or unreadable; the sum "
            "cannot be compared (see shard_missing / header_valid)"
        )
    meta = (ctx.index or {}).get("metadata")
    value = meta.get("total_size") if isinstance(meta, dict) else None
    if value is None:
        return [
            Issue(
                severity="warning",
                rule="total_size",
                file=INDEX_NAME,
                message="index has no metadata.total_size; add the sum of tensor bytes",
            )
        ]
    tensor_bytes = sum(ctx.scans[rel].tensor_bytes for rel in ctx.counted_files)
    file_bytes = sum(ctx.scans[rel].size for rel in ctx.counted_files)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return [
            _err(
                "total_size",
                f"metadata.total_size is {value!r}, not a byte count (expected {tensor_bytes})",
                file=INDEX_NAME,
            )
        ]
    if int(value) == tensor_bytes:
        return []
    if int(value) == file_bytes:
        return [
            Issue(
                severity="warning",
                rule="total_size",
                file=INDEX_NAME,
                message=f"metadata.total_size is {file_bytes}, the sum of file sizes (headers "
                f"included) as Quark writes it; the tensor bytes sum to {tensor_bytes}",
            )
        ]
    return [
        _err(
            "total_size",
            f"metadata.total_size is {int(value)} but the tensors of the indexed shards sum to "
            f"{tensor_bytes} bytes (files: {file_bytes}); the index is stale, regenerate it",
            file=INDEX_NAME,
        )
    ]
