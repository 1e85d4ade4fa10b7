"""Byte sizes as people write them on a command line: ``5GB``, ``500MB``, ``4.5GiB``, ``123``.

Decimal units (``KB`` .. ``TB``) are powers of 1000, binary ones (``KiB`` .. ``TiB``) powers of
1024, a bare number is bytes; case does not matter. Kept apart from the planner so that a
command line can be read without importing it.

Example::

    parse_size("5GB"), parse_size("4.5GiB"), parse_size("1000000")
    # (5000000000, 4831838208, 1000000)
"""

from __future__ import annotations

import re

from checkpoint_tool.errors import UsageError

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """``"5GB"`` -> 5_000_000_000 (decimal units; ``GiB`` etc. binary; bare numbers: bytes)."""
    if isinstance(text, int):
        size = text
    else:
        m = _SIZE.match(text)
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise UsageError(
                f"cannot read size {text!r}; write e.g. 5GB, 500MB, 4.5GiB or a number of bytes"
            )
        size = int(float(m.group(1)) * _UNITS[unit])
    if size < 1:
        raise UsageError(f"size {text!r} must be at least 1 byte")
    return size
