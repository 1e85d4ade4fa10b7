"""The retry policy on its own: attempts, backoff growth, the one line after the last try."""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog.remote import retry
from checkpoint_tool.errors import InputError


def _flaky(failures: int):
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise retry.Transient("HTTP 503")
        return "ok"

    return fn, calls


def test_transient_failures_are_retried_until_success(monkeypatch):
    monkeypatch.setenv("CKPT_REMOTE_RETRIES", "3")
    monkeypatch.setenv("CKPT_REMOTE_BACKOFF", "0")
    fn, calls = _flaky(3)
    assert retry.with_retries(fn, "x") == "ok" and len(calls) == 4


def test_after_the_last_attempt_one_line_names_what_failed(monkeypatch):
    monkeypatch.setenv("CKPT_REMOTE_RETRIES", "2")
    monkeypatch.setenv("CKPT_REMOTE_BACKOFF", "0")
    fn, calls = _flaky(10)
    with pytest.raises(InputError) as exc:
        retry.with_retries(fn, "hf://o/m@c/f.safetensors: bytes 0-9")
    assert len(calls) == 3
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(
        "hf://o/m@c/f.safetensors: bytes 0-9: HTTP 503 after 3"
    )


def test_other_errors_are_not_retried(monkeypatch):
    calls = []

    def fn() -> None:
        calls.append(1)
        raise InputError("404")

    with pytest.raises(InputError):
        retry.with_retries(fn, "x")
    assert len(calls) == 1


def test_backoff_doubles_and_is_capped(monkeypatch):
    monkeypatch.setenv("CKPT_REMOTE_BACKOFF", "0.5")
    assert [retry.backoff_s(a) for a in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert retry.backoff_s(30) == 20.0
