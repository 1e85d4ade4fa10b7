"""Open a local checkpoint folder (or one ``.safetensors`` file in it) as a ``Catalog``.

Reads ``config.json``, ``hf_quant_config.json``, the index and every shard's header (a forked
child reads part of them where that pays, ``header_pool``); never tensor data. The table
(numpy) is imported once the child runs.

Example::

    cat = open_local(Path("./quark-hybrid"))   # ckpt synth quark-hybrid ./quark-hybrid
    cat.files[0], len(cat.files), len(cat.tensors), cat.header_bytes_read
    # ('model-00001-of-000007.safetensors', 7, 306, 34560)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.header_pool import read_headers, read_serial
from checkpoint_tool.catalog.index import (
    INDEX_NAME,
    IndexListing,
    check_index_matches,
    files_from_index,
    read_json_if_present,
)
from checkpoint_tool.catalog.safetensors_format import PICKLE_SUFFIXES
from checkpoint_tool.errors import InputError

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
    read = None
    if single_file is None:
        # a forked child reads the index and the headers while meanwhile runs here
        read, meanwhile = read_headers(root, indexed, meanwhile), None
    index = listing = None
    if read is not None:
        files, index = read.files, read.index_doc
    elif single_file is not None:
        files = [single_file]
    elif indexed:  # the careful read: every error found here, in file order
        index = read_json_if_present(root / INDEX_NAME)
        files = files_from_index(root, index or {})
        listing = IndexListing.take(index or {})
    else:
        files = _shard_files(root)
    if meanwhile is not None:
        meanwhile()
    # the table (numpy) is imported here: a forked child may be parsing headers meanwhile
    from checkpoint_tool.catalog.catalog import Catalog, add_headers

    cat = Catalog(
        root=root, tensors={}, files=files, config=config, hf_quant_config=hf_quant, index=index
    )
    if read is not None:
        add_headers(cat, files, read.headers)
    else:
        add_headers(cat, files, read_serial([root / rel for rel in files]))
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
