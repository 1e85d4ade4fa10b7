"""``source_label``: how a plan and its outputs name their source, the same on any machine.

The one read of planning: for a local source it hashes config.json, hf_quant_config.json, the
index and every shard's header bytes again (~KB per shard). ``plan_for_catalog`` calls it once
and hands the label to ``build_plan``, which stays pure.

Example::

    source_label(open_catalog("/models/quark-hybrid"))   # 'sha256:9f2c...e1'
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog


def source_label(catalog: Catalog) -> str:
    """How outputs name their source, the same on any machine (no local paths).

    A hub source is ``hf://`` + its repo id, an S3 one its URL (the revision is recorded next to
    it); a local one is
    ``sha256:<hex>`` over config.json, hf_quant_config.json, the index and every shard's name
    and header bytes (names, dtypes, shapes, offsets: cheap, ~KB per shard; ``--hash-source``
    adds full data hashes to the manifest). Example: ``"sha256:9f2c...e1"`` or
    ``"hf://deepseek-ai/DeepSeek-R1"`` or ``"s3://bucket/models/R1"``.
    """
    given = str(catalog.source or "")
    if given.startswith("s3://"):  # bucket + prefix; the ETag digest is the revision
        label = given
    elif (
        given and not Path(given).expanduser().exists()
    ):  # a hub repo id, named as the CLI takes it
        label = "hf://" + given.removeprefix("hf://").split("@", 1)[0]
    else:
        h = hashlib.sha256()

        def feed(name: str, data: bytes) -> None:
            raw = name.encode()
            h.update(len(raw).to_bytes(8, "little") + raw + len(data).to_bytes(8, "little") + data)

        for name in ("config.json", "hf_quant_config.json", INDEX_NAME):
            path = catalog.root / name
            if path.is_file():
                feed(name, path.read_bytes())
        for name in sorted(catalog.files):
            with open(catalog.root / name, "rb") as f:
                head = f.read(8)
                size = int.from_bytes(head, "little") if len(head) == 8 else 0
                feed(name, head + f.read(size))
        label = f"sha256:{h.hexdigest()}"
    return label
