"""Rewrite the golden files in ``data/`` from this checkout (only when an output change is
intended; review ``git diff --stat tests/golden/data`` and say why in the commit).

Usage, from the repository root::

    python tests/golden/regen.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from golden_cases import DATA, SHA_FILE, plan_sha, run_cases, write_golden


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outs = run_cases(Path(tmp))
    DATA.mkdir(exist_ok=True)
    for old in DATA.glob("*.json.gz"):
        old.unlink()
    for name, data in outs.items():
        write_golden(name, data)
    shas = {name: plan_sha(data) for name, data in outs.items() if ".plan-" in name}
    SHA_FILE.write_text(json.dumps(shas, indent=2, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in DATA.iterdir())
    print(f"{len(outs)} golden files, {total} bytes in {DATA.name}/")


if __name__ == "__main__":
    main()
