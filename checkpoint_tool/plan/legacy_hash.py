"""The plan hash as ckpt wrote it into manifests before the plan had its own encoding.

Those manifests hold ``plan_sha256`` of pydantic's compact JSON of the plan document
(declaration order, UTF-8 as it is): the plan without its files (``model_dump_json``), then
each file, each prefixed by its byte length (8 bytes, little-endian); a requantized piece was
then spelled as its source name with ``@<scheme>`` appended, without a ``requant`` field.
``execute.manifest.plan_matches`` falls back to this hash, so such an output still verifies.
Slow (pydantic validates the head) and never used to write anything.

Example::

    legacy_plan_sha256(plan)   # 'e4c1...' (what ckpt 0.1.0 recorded for the same plan)
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from checkpoint_tool.plan.model import OutputFile, Plan
from checkpoint_tool.plan.serialize import file_dump, head_dump, plan_document


def legacy_plan_sha256(plan: Plan) -> str:
    """``plan_sha256`` of ``plan`` the way earlier manifests recorded it (module doc)."""
    head = head_dump(plan)
    head["files"] = []
    parts = [plan_document().model_validate(head).model_dump_json(exclude={"files"})]
    h = hashlib.sha256()
    for data in parts + [_file_json(f) for f in plan.files]:
        raw = data.encode()
        h.update(len(raw).to_bytes(8, "little") + raw)
    return h.hexdigest()


def _file_json(f: OutputFile) -> str:
    """A file's compact JSON as pydantic wrote it (for these plain values ``json``'s, keys in
    declaration order, non-ASCII as it is)."""
    data = file_dump(f)
    for t in data["tensors"]:
        t["pieces"] = [_piece(p) for p in t["pieces"]]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _piece(p: dict[str, Any]) -> dict[str, Any]:
    requant = p.pop("requant", None)
    if requant is not None:
        p["source"] = f"{p['source']}@{requant}"
    return p
