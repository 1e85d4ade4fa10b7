"""Config expressions of target specs: small, safe arithmetic over config.json values.

Grammar: names (config keys, ``L`` for the layer index), int/str/None constants, ``+ - * //
%``, comparisons (``== != < <= > >= is is not in not in``), ``and or not`` (Python's
semantics: ``head_dim or hidden_size // num_attention_heads`` is a size) and parentheses. Nothing else
is evaluated (no calls, no attributes), so a spec file cannot run code.

Example::

    evaluate("num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)",
             {"num_attention_heads": 128, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64})
    # 24576
    evaluate("q_lora_rank is None", {"q_lora_rank": 1536})   # False
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from checkpoint_tool.errors import InputError

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


@lru_cache(maxsize=512)
def _parse(text: str) -> ast.expr:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise InputError(f"target spec: cannot read expression {text!r} ({exc.msg})") from None


def evaluate(expr: str | int | None, names: Mapping[str, Any]) -> Any:
    """Value of ``expr`` with ``names`` bound (ints pass through)."""
    if expr is None or isinstance(expr, int):
        return expr
    return _eval(_parse(str(expr)), names, str(expr))


def evaluate_int(expr: str | int, names: Mapping[str, Any], what: str) -> int:
    """``evaluate`` that must give an int (a size); ``what`` names it in errors."""
    value = evaluate(expr, names)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(
            f"config.json: {what} = {expr!r} evaluates to {value!r}, not a size; the config "
            "lacks a key the model needs"
        )
    return value


def _eval(node: ast.expr, names: Mapping[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, (int, str))
    ):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise InputError(
                f"config.json: key {node.id!r} is missing (the target spec reads it in {text!r})"
            )
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, names, text), _eval(node.right, names, text)
        if left is None or right is None:
            raise InputError(f"config.json: {text!r} needs a value that is null in config.json")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, names, text)
    if isinstance(node, ast.BoolOp):
        # Python's semantics: the deciding operand (``head_dim or hidden_size // heads``)
        value = None
        for v in node.values:
            value = _eval(v, names, text)
            if bool(value) != isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        left = _eval(node.left, names, text)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, names, text)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    raise InputError(f"target spec: unsupported syntax in expression {text!r}")
