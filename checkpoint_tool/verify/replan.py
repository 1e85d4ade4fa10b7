"""The plan a converted checkpoint was written from, rebuilt from its manifest and the source.

``ckpt convert`` records the recipe, the options and the plan's sha256 in ``ckpt-manifest.json``
(and the size and header hash of every source shard). Verify checks that ``--source`` is the
checkpoint DST came from (same shard headers), plans again with the recorded recipe/options,
and compares the fingerprint: equal means the byte comparison follows exactly the plan convert
executed.

Example::

    manifest = require_manifest(Path("/out/model"))
    check_source_identity(manifest, source_catalog)          # UsageError if another source
    plan, same = rebuild_plan(manifest, source_catalog)      # same: plan_sha256 matches
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import CkptError, UsageError
from checkpoint_tool.execute.manifest import MANIFEST_NAME, Manifest, plan_matches, read_manifest
from checkpoint_tool.execute.open_source import open_sources
from checkpoint_tool.plan.build import plan_for_catalog
from checkpoint_tool.plan.model import Plan


def require_manifest(dst: Path) -> Manifest:
    """The manifest of DST, or a UsageError saying why the lossless check cannot run."""
    manifest = read_manifest(dst)
    if manifest is None:
        raise UsageError(
            f"{Path(dst) / MANIFEST_NAME}: missing; DST was not written by `ckpt convert` (or the "
            "conversion did not finish). Pass --no-lossless to run only the numeric check"
        )
    return manifest


def ckpt_meta(dst: Path) -> dict[str, Any]:
    """DST's ``config.json["ckpt"]`` (what convert recorded: FSE slots, TP, requantization),
    ``{}`` when it has none."""
    try:
        meta = json.loads((Path(dst) / "config.json").read_text()).get("ckpt")
    except (OSError, ValueError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def check_source_identity(manifest: Manifest, catalog: Catalog) -> None:
    """Raise ``UsageError`` when SRC's shards are not the ones DST was converted from.

    Compares each recorded source shard's size and header sha256 (what convert records by
    default); a missing shard or a different header means another checkpoint or another
    revision.
    """
    recorded = {f.name: f for f in manifest.source_files}
    missing = sorted(set(recorded) - set(catalog.files))
    if missing:
        raise UsageError(
            f"{catalog.root / missing[0]}: the source DST was converted from had this shard "
            f"({len(missing)} missing in all); pass the --source used for the conversion"
        )
    with open_sources(catalog, sorted(recorded)) as files:
        for name, rec in sorted(recorded.items()):
            st = files.stats[name]
            if (st.size, st.header_sha256) != (rec.size, rec.header_sha256):
                raise UsageError(
                    f"{catalog.root / name}: differs from the shard DST was converted from "
                    f"(size {st.size} vs {rec.size} or header sha256); pass the --source used "
                    "for the conversion"
                )


def rebuild_plan(
    manifest: Manifest, catalog: Catalog, *, requant: dict | None = None
) -> tuple[Plan, bool]:
    """Plan ``catalog`` again with the manifest's recipe and options.

    Returns the plan and whether its fingerprint equals ``manifest.plan_sha256`` (computed with
    the manifest's source string, revision and ckpt version, which only label the plan; an
    earlier ckpt's hash counts too: ``execute.manifest.plan_matches``).
    ``requant``: DST's ``config.json["ckpt"]["requantized_shared"]`` (``quant.requant``).
    """
    try:
        if requant is None:
            plan = plan_for_catalog(catalog, manifest.options, recipe=manifest.recipe)
        else:  # convert --requantize-shared: the recorded layers and errors
            from checkpoint_tool.requant.plan import replan_recorded

            plan = replan_recorded(catalog, manifest.options, manifest.recipe, requant)
    except CkptError as exc:
        raise UsageError(
            f"cannot plan the source again with the recorded recipe {manifest.recipe!r} and "
            f"options: {exc.message}"
        ) from exc
    labelled = dataclasses.replace(
        plan,
        source=manifest.source,
        source_revision=manifest.source_revision,
        ckpt_version=manifest.ckpt_version,
    )
    if labelled.config is not None and isinstance(labelled.config.get("ckpt"), dict):
        config = dict(labelled.config)
        meta = dict(config["ckpt"])
        meta.update(
            source=manifest.source,
            source_revision=manifest.source_revision,
            ckpt_version=manifest.ckpt_version,
        )
        config["ckpt"] = meta
        labelled = dataclasses.replace(labelled, config=config)
    return labelled, plan_matches(labelled, manifest.plan_sha256)
