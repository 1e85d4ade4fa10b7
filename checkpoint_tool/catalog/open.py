"""Open any checkpoint source as a header-only ``Catalog``: the one place that tells them apart.

A remote source (``hf://org/name@rev``, ``org/name``, ``s3://bucket/prefix``) goes to
``catalog.remote.open``; a folder or one ``.safetensors`` file to ``catalog.local``. Each is
imported when its kind of source comes: opening a folder starts its header reader before
numpy and the catalog's table are imported (``catalog.local``).

Example::

    open_catalog("./quark-hybrid").source                   # './quark-hybrid'
    open_catalog("hf://amd/tiny-mxfp4@main").revision        # '56d4cbbb...' (the commit)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.local import open_local
from checkpoint_tool.catalog.sources import parse_remote, resolve_source

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog


def open_catalog(
    source: str | os.PathLike[str],
    *,
    headers_only: bool = True,
    meanwhile: Callable[[], object] | None = None,
) -> Catalog:
    """Open a local path or a Hugging Face repo id (``org/name``, ``hf://org/name@rev``).

    ``meanwhile`` (e.g. importing what comes next) is called once while the headers are
    read, when a forked child parses part of them (``header_pool``).
    """
    if parse_remote(str(source)) is not None:
        from checkpoint_tool.catalog.remote.open import open_remote

        remote = open_remote(str(source), headers_only=headers_only)
        if remote is not None:
            return remote
    root, single_file, revision = resolve_source(str(source), headers_only=headers_only)
    cat = open_local(root, single_file=single_file, meanwhile=meanwhile)
    cat.source = str(source)
    cat.revision = revision
    return cat
