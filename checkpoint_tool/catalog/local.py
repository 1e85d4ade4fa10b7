"""Open a local checkpoint folder (or one ``.safetensors`` file in it) as a ``Catalog``.

Reads ``config.json``, ``hf_quant_config.json``, the index and every shard's header (in a
forked child where that pays, ``header_pool``); never tensor data. The table (numpy) is
imported once the child runs.

Example::

    cat = open_local(Path("./quark-hybrid"))   # ckpt synth quark-hybrid ./quark-hybrid
    cat.files[0], len(cat.files), len(cat.tensors), cat.header_bytes_read
    # ('model-00001-of-000007.safetensors', 7, 306, 34560)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.header_pool import HeaderReader, read_verified
from checkpoint_tool.catalog.index import (
    INDEX_NAME,
    IndexListing,
    check_index_matches,
    files_from_index,
    read_json_if_present,
)
from checkpoint_tool.catalog.safetensors_format import PICKLE_SUFFIXES
from checkpoint_tool.errors import InputError
from checkpoint_tool.forked import can_fork

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog


def open_local(
    root: Path,
    *,
    single_file: str | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Catalog:
    """Open a local folder (or one file inside it) as a catalog (``meanwhile``: see
    ``catalog.open.open_catalog``)."""
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root}: no such file or folder; give a checkpoint folder or a repo id")
    config = read_json_if_present(root / "config.json")
    hf_quant = read_json_if_present(root / "hf_quant_config.json")
    indexed = single_file is None and (root / INDEX_NAME).exists()
    verified = None
    if indexed and meanwhile is not None and can_fork():
        # a forked child reads the index and every header while meanwhile runs here
        verified, meanwhile = read_verified(root, meanwhile), None
    index = listing = reader = None
    if verified is not None:
        files, index = verified.files, verified.index_doc
    elif single_file is not None:
        files = [single_file]
    elif indexed:
        # a forked child starts parsing the shards next to the index while it is read here
        reader = HeaderReader(sorted(root.glob("*.safetensors")))
        try:
            index = read_json_if_present(root / INDEX_NAME)
            files = files_from_index(root, index or {})
            listing = IndexListing.take(index or {})
        except BaseException:
            reader.close()
            raise
    else:
        files = _shard_files(root)
    # the table (numpy) is imported here: a forked child may be parsing headers meanwhile
    from checkpoint_tool.catalog.catalog import Catalog, add_headers

    cat = Catalog(
        root=root, tensors={}, files=files, config=config, hf_quant_config=hf_quant, index=index
    )
    paths = [root / rel for rel in files]
    if verified is not None:
        add_headers(cat, files, verified.headers)
    else:
        add_headers(cat, files, (reader or HeaderReader(paths)).read(paths, meanwhile))
    if listing is not None:
        check_index_matches(root, listing, cat)
    return cat


def _shard_files(root: Path) -> list[str]:
    """The ``*.safetensors`` files of a folder without an index (sorted)."""
    files = sorted(p.name for p in root.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise InputError(
                f"{root}: only pickle-based weights ({', '.join(pickles[:3])}); ckpt never "
                "unpickles: convert them to safetensors first"
            )
        raise InputError(f"{root}: no *.safetensors files and no {INDEX_NAME}")
    return files
