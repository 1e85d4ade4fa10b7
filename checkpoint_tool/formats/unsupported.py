"""``unsupported``: a recognised config ckpt has no codec for (int4, fp6, ...). Its tensors are
copied as they are; anything that must decode them refuses with the scheme's rule.

Example::

    format_of("unsupported").decodable      # False
    format_of("unsupported").storage_for(scheme)
    # InputError: no codec for this quantization scheme (rule: ...); ckpt can copy ...
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.formats.base import Format, Options
from checkpoint_tool.formats.names import WeightFormat


class Unsupported(Format):
    member = WeightFormat.UNSUPPORTED

    def build(self, cls: type[Any], options: Options) -> Any:
        raise AssertionError("unreachable: an unsupported format has no storage class")
