"""A local stand-in of a remote checkpoint for ``ckpt validate``: real headers, no data.

``validate`` inspects the layout as it is on disk (lenient header scans, sizes, the index), so a
remote source becomes a temporary folder holding its small JSON files and, per shard, a sparse
file of the remote size whose first bytes are the remote length prefix and header (ranged
reads, as for inspect). Tensor bytes are never faked: every data read (scale sanity,
``--scan-weights``) goes through the catalog's store to the server. The folder lives in the
system temp dir (never in the hub cache, whose complete snapshots ckpt reads as real shards)
and is removed when the process exits.

Example::

    view, store = remote_view("hf://org/model@main")
    sorted(p.name for p in view.iterdir())
    # ['config.json', 'model-00001-of-00002.safetensors', ..., 'model.safetensors.index.json']
"""

from __future__ import annotations

import atexit
import os
import shutil
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from checkpoint_tool.catalog.remote.open import SMALL_FILES, SPECULATIVE, fetch_small, open_store
from checkpoint_tool.catalog.remote.store import Store, parallel
from checkpoint_tool.catalog.safetensors_format import MAX_HEADER_BYTES


def remote_view(source: str) -> tuple[Path, Store] | None:
    """``(folder, store)`` for a hub / S3 source; None for a local path."""
    opened = open_store(source)
    if opened is None:
        return None
    store, cache_root = opened
    view = Path(tempfile.mkdtemp(prefix="ckpt-remote-view-"))
    atexit.register(shutil.rmtree, view, True)
    for rel in SMALL_FILES:
        if rel in store.files:
            store.count(fetch_small(store, cache_root, rel))
            shutil.copyfile(cache_root / rel, view / rel)
    shards = sorted(r for r in store.files if r.endswith(".safetensors") and "/" not in r)
    with ThreadPoolExecutor(min(parallel(), max(1, len(shards)))) as pool:
        for fut in [pool.submit(_stub, store, rel, view / rel) for rel in shards]:
            fut.result()
    return view, store


def _stub(store: Store, rel: str, dest: Path) -> None:
    size = store.file(rel).size
    head = store.read(rel, 0, min(size, SPECULATIVE))
    if len(head) >= 8:
        (n,) = struct.unpack("<Q", head[:8])
        need = 8 + n
        if n <= MAX_HEADER_BYTES and len(head) < need <= size:
            head += store.read(rel, len(head), need - len(head))
        head = head[: max(8, min(len(head), need))]
    with open(dest, "wb") as fh:
        fh.write(head)
        os.ftruncate(fh.fileno(), size)  # the data region: a hole, never read
