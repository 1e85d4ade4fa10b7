"""Bounded JSON reading for every JSON file ckpt takes from a checkpoint: size, depth, numbers.

A checkpoint's JSON is input from whoever published it. Each read here is bounded and every
fault is one ``InputError`` line naming the file (never a ``RecursionError`` or
``MemoryError`` traceback):

- **size**: ``config.json`` / ``hf_quant_config.json`` at most ``MAX_CONFIG_BYTES`` (64 MiB;
  DeepSeek-R1's is 1.7 KB, amd/DeepSeek-R1-0528-MXFP4's with its 1,084 exclude names ~60 KB,
  a 10^5-name exclude list ~7 MB), the shard index at most ``MAX_INDEX_BYTES`` (256 MiB; R1's
  is 8.6 MB, the 486,737-tensor scale preset's ~50 MB), a safetensors header at most
  ``MAX_HEADER_BYTES`` (100 MiB, safetensors' own limit);
- **depth**: objects and arrays nested at most ``MAX_JSON_DEPTH`` (32) deep (a real config is
  4-5 deep); deeper, or deep enough to exhaust Python's parser, is refused;
- **numbers**: ``NaN``, ``Infinity`` and floats that overflow to infinity (``1e999``) are not
  JSON and are refused (Python's ``json`` would accept them, and ckpt would write them back
  into the output's config.json); integers longer than Python's 4300-digit limit too.

Example::

    load_json(b'{"hidden_size": 7168}', "config.json")          # {'hidden_size': 7168}
    load_json(b'{"rms_norm_eps": Infinity}', "config.json")
    # InputError: config.json: Infinity is not a JSON number; ...
    read_json_file(Path("config.json"), MAX_CONFIG_BYTES)      # the object, or InputError
"""

from __future__ import annotations

import json
import math
import reprlib
from pathlib import Path
from typing import Any

from checkpoint_tool.errors import InputError

MAX_JSON_DEPTH = 32
MAX_CONFIG_BYTES = 64 * 1024 * 1024
MAX_INDEX_BYTES = 256 * 1024 * 1024

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = 80
_repr.maxother = 80


def short_repr(value: object) -> str:
    """A bounded ``repr`` for error messages (a nested or huge value stays one short line)."""
    return _repr.repr(value)


class _NotJsonNumber(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJsonNumber(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJsonNumber(f"{text[:40]} overflows a float (not a finite number)")
    return value


def load_json(raw: bytes | str, where: object, *, check_depth: bool = True) -> Any:
    """Parse ``raw`` (UTF-8 JSON) with the limits above; ``where`` names the file in errors.

    ``check_depth=False`` leaves the depth to the caller's own structure check (a safetensors
    header's entries are checked field by field) but still refuses what Python cannot parse.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotJsonNumber as exc:
        raise InputError(f"{where}: {exc}; JSON has no NaN or infinity, fix the value") from None
    except RecursionError:
        raise InputError(
            f"{where}: JSON nested too deep to parse (limit {MAX_JSON_DEPTH} levels); the file "
            "is corrupt or crafted, restore it from the model's release"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, int digit limit
        raise InputError(
            f"{where}: not valid JSON ({str(exc)[:200]}); fix or restore the file"
        ) from None
    if check_depth:
        _check_depth(doc, where)
    return doc


def _check_depth(doc: Any, where: object) -> None:
    """Objects/arrays at most ``MAX_JSON_DEPTH`` deep, walked without recursion (a flat
    ``weight_map`` of ~92k strings costs one pass over its values)."""
    level: list[Any] = [doc]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise InputError(
                f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep; a checkpoint's "
                "JSON is a few levels deep: the file is corrupt or crafted, restore it"
            )
        nxt: list[Any] = []
        for node in level:
            values = node.values() if type(node) is dict else node
            nxt += [v for v in values if type(v) is dict or type(v) is list]
        level = nxt


def read_json_file(path: Path, max_bytes: int) -> Any:
    """The parsed JSON of ``path``, refused past ``max_bytes`` before it is read."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError(
                f"{path}: {size} bytes, over ckpt's limit of {max_bytes} for this file; "
                "a real checkpoint's is far smaller: the file is corrupt or not what it is named"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(
            f"{path}: cannot read ({exc.strerror}); check the path and permissions"
        ) from exc
    return load_json(raw, path)
