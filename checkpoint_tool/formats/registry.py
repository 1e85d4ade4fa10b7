"""The registered formats and ``format_of``: the one place a ``Scheme.format`` member becomes
the object that knows it.

A new format registers itself by being listed in ``formats/__init__.py`` (``register``).

Example::

    format_of(scheme)                 # scheme.format == WeightFormat.MXFP4 -> <format mxfp4>
    format_of(WeightFormat.FP8_BLOCK) # <format fp8_block>
    format_of("nvfp4")                # <format nvfp4>
    [f.name for f in all_formats()]   # ['unquantized', 'fp8_per_tensor', ...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.base import Format
from checkpoint_tool.formats.names import WeightFormat

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme

_FORMATS: dict[WeightFormat, Format] = {}


def register(fmt: Format) -> Format:
    """Make ``fmt`` the answer for its ``member``; one format per member."""
    if fmt.member in _FORMATS:
        raise ValueError(f"format {fmt.name!r} is registered twice")
    _FORMATS[fmt.member] = fmt
    return fmt


def format_of(what: Scheme | WeightFormat | str) -> Format:
    """The format of a scheme, a ``WeightFormat`` member or its spelling (``"mxfp4"``).

    An unknown spelling or a member no module registered: ``InputError``.
    """
    member = what if isinstance(what, str) else what.format  # a WeightFormat is a str
    fmt = _FORMATS.get(member)  # type: ignore[call-overload]
    if fmt is not None:
        return fmt
    try:
        fmt = _FORMATS.get(WeightFormat(member))
    except ValueError:
        fmt = None
    if fmt is None:
        raise InputError(f"no codec for weight format '{member}' (ckpt cannot decode it)")
    return fmt


def all_formats() -> list[Format]:
    """Every registered format, in registration order."""
    return list(_FORMATS.values())
