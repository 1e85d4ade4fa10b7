"""Execute a Plan: stream source byte ranges into atomic safetensors files, index, manifest.

Public surface::

    from checkpoint_tool.execute import execute_plan, ConvertReport, read_manifest, Manifest
    report = execute_plan(plan, catalog, Path("/out/model"), workers=2, resume=False)
"""

from checkpoint_tool.execute.manifest import MANIFEST_NAME, Manifest, read_manifest
from checkpoint_tool.execute.runner import DEFAULT_MEMORY_BUDGET, ConvertReport, execute_plan

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MANIFEST_NAME",
    "ConvertReport",
    "Manifest",
    "execute_plan",
    "read_manifest",
]
