"""Retries with exponential backoff for remote reads; one line after the last attempt.

A transient fault (connection reset or refused, a timeout, HTTP 429 / 5xx, a body shorter than
its ``Content-Length``) raises ``Transient``; anything else (401, 404, an ETag that changed) is
final at once. Settings come from the environment so every command shares them:

- ``CKPT_REMOTE_RETRIES`` (default 5): attempts after the first;
- ``CKPT_REMOTE_BACKOFF`` (default 0.5 s): first wait, doubled per attempt, capped at 20 s;
- ``CKPT_REMOTE_TIMEOUT`` (default 60 s): connect / read timeout of one request.

Example::

    data = with_retries(lambda: fetch("model-00001.safetensors", 0, 8), "hf://org/m: model-00001...")
    # after the last failed attempt:
    # InputError("hf://org/m: model-00001...: bytes 0-7: HTTP 503 after 6 attempts; ...")
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from checkpoint_tool.errors import InputError

T = TypeVar("T")


class Transient(Exception):
    """A fault worth retrying; ``str()`` is the one-line reason (``HTTP 503``, ``timeout``)."""


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def retries() -> int:
    return max(0, int(_env_float("CKPT_REMOTE_RETRIES", 5)))


def timeout_s() -> float:
    return _env_float("CKPT_REMOTE_TIMEOUT", 60.0)


def backoff_s(attempt: int) -> float:
    """Wait before attempt ``attempt + 1`` (``attempt`` counts from 0)."""
    return min(20.0, _env_float("CKPT_REMOTE_BACKOFF", 0.5) * (2**attempt))


def with_retries(
    fn: Callable[[], T], what: str, *, on_retry: Callable[[], None] | None = None
) -> T:
    """``fn()``, retried on ``Transient`` with backoff; ``InputError`` after the last try."""
    attempts = retries() + 1
    for attempt in range(attempts):
        try:
            return fn()
        except Transient as exc:
            if attempt == attempts - 1:
                raise InputError(
                    f"{what}: {exc} after {attempts} attempts; the server or network is failing, "
                    "rerun later (convert: add --resume to keep the files already written)"
                ) from None
            if on_retry is not None:
                on_retry()
            time.sleep(backoff_s(attempt))
    raise AssertionError("unreachable")  # pragma: no cover
