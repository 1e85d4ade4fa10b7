"""Storage dtype facts, kept importable here: they live in ``formats.dtypes``.

Example::

    from checkpoint_tool.quant.storage.dtypes import one_fill   # one_fill("F32") -> '0000803f'
"""

from checkpoint_tool.formats.dtypes import (
    ELEMENT_SIZE,
    is_e8m0_dtype,
    is_float_dtype,
    one_fill,
    zero_fill,
)

__all__ = ["ELEMENT_SIZE", "is_e8m0_dtype", "is_float_dtype", "one_fill", "zero_fill"]
