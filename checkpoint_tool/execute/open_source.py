"""Open the shards a run reads: local descriptors or remote ranged reads, chosen here once.

Example::

    with open_sources(catalog, catalog.files) as sources:   # a LocalSourceFiles here
        sources.local, sorted(sources.stats)[:1]            # (True, ['model-00001-of-00002...'])
"""

from __future__ import annotations

from collections.abc import Iterable

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.execute.local_source import LocalSourceFiles
from checkpoint_tool.execute.remote_source import RemoteSourceFiles
from checkpoint_tool.execute.source import SourceFiles


def open_sources(catalog: Catalog, files: Iterable[str]) -> SourceFiles:
    """``files`` of ``catalog`` opened for reading and checked against the catalog."""
    if catalog.store is not None:
        return RemoteSourceFiles.open(catalog, files)
    return LocalSourceFiles.open(catalog, files)
