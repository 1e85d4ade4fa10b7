"""Open a remote checkpoint as a header-only ``Catalog``: small files plus shard headers.

What is transferred: ``config.json``, ``hf_quant_config.json`` and the index (into a local
folder: the hub cache snapshot at the resolved commit, or ``~/.cache/ckpt/s3/...``), then for
each shard one ranged read of its first 64 KiB and, when the header is longer, one more for the
rest: the header bytes and at most 64 KiB more per shard. ``headers_only=False`` (convert) also
fetches the side files it will copy (tokenizer, generation config; never pickles).

Hub specifics: ``HF_HUB_OFFLINE=1`` opens the cached snapshot and never touches the network;
online, a snapshot already complete in the cache (every shard, at the right size) is read
locally (pread / copy_file_range paths) and only the revision is resolved remotely.

Example::

    cat = open_remote("hf://deepseek-ai/DeepSeek-R1@main", headers_only=True)
    cat.source, cat.revision, cat.bytes_transferred
    # ('hf://deepseek-ai/DeepSeek-R1', '56d4cbbb...', 30713331)
"""

from __future__ import annotations

import hashlib
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from checkpoint_tool.catalog.catalog import Catalog, add_headers
from checkpoint_tool.catalog.index import (
    INDEX_NAME,
    IndexListing,
    check_index_matches,
    files_from_index,
    read_json_if_present,
)
from checkpoint_tool.catalog.local import open_local
from checkpoint_tool.catalog.paths import Where
from checkpoint_tool.catalog.remote.store import Store, parallel
from checkpoint_tool.catalog.safetensors_format import PICKLE_SUFFIXES, FileHeader, parse_header
from checkpoint_tool.catalog.sources import HUB_PATTERNS, parse_remote
from checkpoint_tool.errors import InputError

#: the first read of each shard: most headers fit, a longer one costs a second request
SPECULATIVE = 64 << 10
SMALL_FILES = ("config.json", "hf_quant_config.json", INDEX_NAME)


def open_remote(source: str, *, headers_only: bool = True) -> Catalog | None:
    """A catalog of a hub repo or an S3 prefix; None when ``source`` is a local path."""
    ref = parse_remote(source)
    if ref is None:
        return None
    if ref[0] == "hf":
        from checkpoint_tool.catalog.remote.hub import cache_dir, offline

        if offline():
            return _open_cached(ref[1], ref[2], cache_dir())
    opened = open_store(source)
    assert opened is not None
    return _open_store(*opened, headers_only)


def open_store(source: str) -> tuple[Store, Path] | None:
    """``(store, local folder for its small files)``, or None for a local path.

    With ``HF_HUB_OFFLINE`` set a hub source is an ``InputError`` here (no listing without the
    network); ``open_remote`` reads the cached snapshot instead.
    """
    ref = parse_remote(source)
    if ref is None:
        return None
    if ref[0] == "s3":
        from checkpoint_tool.catalog.remote.s3 import S3Store

        store: Store = S3Store.open(ref[1], ref[2] or "")
        return store, _s3_root(store)
    from checkpoint_tool.catalog.remote.hub import HubStore, cache_dir, offline

    if offline():
        raise InputError(
            f"{source}: HF_HUB_OFFLINE is set; validate the cached snapshot folder instead, "
            "or unset HF_HUB_OFFLINE"
        )
    store = HubStore.open(ref[1], ref[2])
    root = cache_dir() / f"models--{ref[1].replace('/', '--')}" / "snapshots" / store.revision
    return store, root


def _s3_root(store: Store) -> Path:
    base = Path(os.environ.get("CKPT_CACHE") or Path.home() / ".cache" / "ckpt")
    return base / "s3" / store.source.removeprefix("s3://") / store.revision.split(":")[-1]


def _open_cached(repo: str, revision: str | None, cache: Path) -> Catalog:
    from huggingface_hub import snapshot_download

    try:
        folder = Path(
            snapshot_download(
                repo,
                revision=revision,
                local_files_only=True,
                cache_dir=cache,
                allow_patterns=HUB_PATTERNS,
            )
        )
    except Exception as exc:
        raise InputError(
            f"hf://{repo}@{revision or 'main'}: HF_HUB_OFFLINE is set and the repo is not in the "
            f"local cache ({type(exc).__name__}); run once online, or unset HF_HUB_OFFLINE"
        ) from None
    cat = open_local(folder)
    cat.source, cat.revision = f"hf://{repo}", folder.name
    return cat


def fetch_small(store: Store, root: Path, rel: str) -> int:
    """One small file into ``root``; bytes transferred that the store did not count itself
    (``hf_hub_download`` bypasses it; 0 when the file was already there)."""
    download = store.download  # type: ignore[attr-defined]
    if store.source.startswith("hf://"):
        return download(rel)[1]
    dest = root / rel
    if dest.is_file() and dest.stat().st_size == store.files[rel].size:
        return 0
    download(rel, dest)  # through store.read: counted there
    return 0


def _open_store(store: Store, root: Path, headers_only: bool) -> Catalog:
    where = Where(store.label)
    wanted = [rel for rel in SMALL_FILES if rel in store.files]
    if not headers_only:
        wanted += store.side_files(set(SMALL_FILES))
    for rel in wanted:
        store.count(fetch_small(store, root, rel))
    root.mkdir(parents=True, exist_ok=True)
    index = read_json_if_present(root / INDEX_NAME) if INDEX_NAME in store.files else None
    if index is not None:
        files = files_from_index(where, index, exists=store.files.__contains__)
    else:
        files = sorted(r for r in store.files if r.endswith(".safetensors") and "/" not in r)
        if not files:
            pickles = sorted(r for r in store.files if r.endswith(PICKLE_SUFFIXES))
            if pickles:
                raise InputError(
                    f"{where}: only pickle-based weights ({', '.join(pickles[:3])}); ckpt never "
                    "unpickles: convert them to safetensors first"
                )
            raise InputError(f"{where}: no *.safetensors files and no {INDEX_NAME}")
    if all(_cached(root / rel, store.files[rel].size) for rel in files):
        cat = open_local(root)  # every shard is in the local cache: read it there
    else:
        listing = IndexListing.take(index) if index is not None else None
        cat = Catalog(
            root=root,
            tensors={},
            files=files,
            config=read_json_if_present(root / "config.json"),
            hf_quant_config=read_json_if_present(root / "hf_quant_config.json"),
            index=index,
            store=store,
        )
        headers = read_headers(store, files)
        add_headers(cat, files, headers)
        cat.header_bytes_read = sum(8 + h.header_len for h in headers)
        if listing is not None:
            check_index_matches(where, listing, cat)
    cat.source, cat.revision = store.source, store.revision
    return cat


def _cached(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def read_headers(store: Store, files: list[str]) -> list[FileHeader]:
    """The parsed header of each file, read in parallel; the first error in file order."""
    with ThreadPoolExecutor(min(parallel(), max(1, len(files)))) as pool:
        futures = [pool.submit(_header, store, rel) for rel in files]
    return [f.result() for f in futures]


def _header(store: Store, rel: str) -> FileHeader:
    where = store.where(rel)
    size = store.file(rel).size
    if size < 8:
        raise InputError(
            f"{where}: file is {size} bytes, too short for a safetensors header; "
            "the shard is truncated"
        )
    first = store.read(rel, 0, min(size, SPECULATIVE))
    (header_len,) = struct.unpack("<Q", first[:8])
    need = 8 + header_len
    if header_len > (100 << 20) or need > size:
        return parse_header(where, header_len, b"", size)  # raises the usual message
    raw = (
        first[8:need]
        if len(first) >= need
        else first[8:] + store.read(rel, len(first), need - len(first))
    )
    header = parse_header(where, header_len, raw, size)
    store.record_header_sha256(rel, hashlib.sha256(first[:8] + raw).hexdigest())
    return header
