"""Regular expressions taken from input (Quark ``re:`` excludes, ``layer_quant_config`` keys,
recipe rules), checked before they run so that no match can take exponential time.

Python's ``re`` backtracks: ``^([a-z_.0-9]+)+!$`` takes minutes on one 40-character tensor
name. ckpt reads every such pattern with ``re``'s own parser and refuses (one ``InputError``
line naming the pattern and where it came from):

- a quantifier inside a quantified group (``(a+)+``, ``(\\w*\\.)*``): exponential;
- a quantified alternation (``(a|ab)*``): exponential;
- backreferences (``(a)\\1``): not regular, no linear bound;
- more than ``MAX_UNBOUNDED`` (3) unbounded quantifiers (``.*.*.*.*!`` is O(n^4): 25 ms on a
  116-character name, and a matcher runs once per module, ~47k for DeepSeek-R1): three stay
  under 0.5 ms on such a name;
- a pattern longer than ``MAX_PATTERN`` (1,000) characters.

Every pattern a published checkpoint or ckpt's recipes use passes (``re:.*self_attn.*``,
``re:model\\.layers\\.\\d+\\.mlp\\.gate$``, ``(\\.experts\\.\\d+\\.w[123])\\.scale$``).
A linear-time engine (``google-re2``, wheels for CPython 3.10-3.13) was considered: its syntax
differs from ``re`` (no lookaround, other escapes), so a result would depend on whether it is
installed; the check gives the same answer everywhere.

Example::

    check_regex(r"^model\\.layers\\.\\d+\\.", "recipe deepseek-v3 regex[0]")   # fine
    check_regex(r"^([a-z_.0-9]+)+!$", "config.json quantization_config.exclude")
    # InputError: config.json quantization_config.exclude: regex '^([a-z_.0-9]+)+!$' nests a
    #   quantifier inside a quantified group, which can take exponential time; ...
"""

from __future__ import annotations

import re
from typing import Any

from checkpoint_tool.errors import InputError

try:  # Python 3.11+
    from re import _constants as _sre_c  # type: ignore[attr-defined]
    from re import _parser as _sre_p  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_p  # type: ignore[no-redef]

MAX_PATTERN = 1000
MAX_UNBOUNDED = 3

_REPEATS = {_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT} | (
    {_sre_c.POSSESSIVE_REPEAT} if hasattr(_sre_c, "POSSESSIVE_REPEAT") else set()
)
_BACKREFS = {_sre_c.GROUPREF, _sre_c.GROUPREF_EXISTS}
#: a quantifier whose upper bound is at least this counts as unbounded (``{0,1000}`` too)
_WIDE = 16


def _problem(parsed: Any) -> str | None:
    """Why ``parsed`` (an ``re`` parse tree) may backtrack without bound, or None."""
    unbounded = 0
    # (node list, inside a wide quantifier?)
    stack: list[tuple[Any, bool]] = [(parsed, False)]
    while stack:
        seq, in_repeat = stack.pop()
        for op, av in seq:
            if op in _BACKREFS:
                return "uses a backreference, which has no linear-time bound"
            if op in _REPEATS:
                _lo, hi, body = av
                wide = hi >= _WIDE or hi == _sre_c.MAXREPEAT
                if wide:
                    unbounded += 1
                    if in_repeat:
                        return (
                            "nests a quantifier inside a quantified group, which can take "
                            "exponential time"
                        )
                stack.append((body, in_repeat or wide))
            elif op is _sre_c.BRANCH:
                if in_repeat:
                    return "repeats an alternation, which can take exponential time"
                for alt in av[1]:
                    stack.append((alt, in_repeat))
            elif op is _sre_c.SUBPATTERN:
                stack.append((av[-1], in_repeat))
            elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
                stack.append((av[1], in_repeat))
            elif hasattr(_sre_c, "ATOMIC_GROUP") and op is _sre_c.ATOMIC_GROUP:
                stack.append((av, in_repeat))
    if unbounded > MAX_UNBOUNDED:
        return (
            f"has {unbounded} unbounded quantifiers (at most {MAX_UNBOUNDED}: each more "
            "multiplies the time a failing match takes by the name's length)"
        )
    return None


def check_regex(pattern: str, where: str) -> None:
    """Refuse ``pattern`` (from ``where``, e.g. ``"config.json quantization_config.exclude"``)
    when it is not a valid regex or may take more than polynomial time; see the module doc."""
    shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
    if len(pattern) > MAX_PATTERN:
        raise InputError(
            f"{where}: regex {shown!r} is {len(pattern)} characters, over ckpt's limit of "
            f"{MAX_PATTERN}; list the names or use a shorter pattern"
        )
    try:
        parsed = _sre_p.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise InputError(f"{where}: {shown!r} is not a valid regular expression ({exc})") from None
    why = _problem(parsed)
    if why is not None:
        raise InputError(
            f"{where}: regex {shown!r} {why}; rewrite it without nested or repeated "
            "alternatives (e.g. '[a-z_.0-9]+' instead of '([a-z_.0-9]+)+')"
        )


def compile_checked(pattern: str, where: str) -> re.Pattern[str]:
    """``re.compile(pattern)`` after ``check_regex``."""
    check_regex(pattern, where)
    return re.compile(pattern)
