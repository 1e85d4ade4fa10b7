"""``RequantCache``: a run's requantized modules, quantized once, bounded in bytes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.requant_node import RequantCache


def _key(i: int) -> tuple:
    return (("a.safetensors", 100 * i, 100 * i + 64), None)


def _value(rng: np.random.Generator, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(0, 255, nbytes, dtype=np.uint8), rng.integers(0, 255, 2, dtype=np.uint8)


def test_hit_returns_the_first_computation_and_eviction_keeps_within_bytes() -> None:
    rng = np.random.default_rng(0)
    cache = RequantCache(max_bytes=250)
    first = cache.get(_key(0), lambda: _value(rng, 100))
    again = cache.get(_key(0), lambda: pytest.fail("recomputed a cached module"))
    assert again[0] is first[0]
    cache.get(_key(1), lambda: _value(rng, 100))
    cache.get(_key(2), lambda: _value(rng, 100))  # 306 bytes > 250: the oldest goes
    assert cache.computed == 3
    assert _key(0) not in cache.entries and list(cache.entries) == [_key(1), _key(2)]
    cache.get(_key(0), lambda: _value(rng, 100))
    assert cache.computed == 4


def test_the_last_module_is_kept_even_above_the_bound() -> None:
    rng = np.random.default_rng(1)
    cache = RequantCache(max_bytes=0)
    cache.get(_key(0), lambda: _value(rng, 64))
    cache.get(_key(0), lambda: pytest.fail("recomputed the last module"))
    assert cache.computed == 1


def test_threads_asking_for_one_module_share_one_computation() -> None:
    rng = np.random.default_rng(2)
    cache = RequantCache(max_bytes=1 << 20)
    gate = threading.Event()
    calls: list[int] = []

    def slow() -> tuple[np.ndarray, np.ndarray]:
        calls.append(1)
        gate.wait(5)
        return _value(rng, 32)

    out: list[tuple] = []
    threads = [threading.Thread(target=lambda: out.append(cache.get(_key(0), slow)))
               for _ in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(out) == 4
    assert all(o[0] is out[0][0] for o in out)


def test_a_failed_computation_is_not_cached_and_releases_waiters() -> None:
    rng = np.random.default_rng(3)
    cache = RequantCache(max_bytes=1 << 20)

    def bad() -> tuple[np.ndarray, np.ndarray]:
        raise InputError("x.weight: not a weight")

    with pytest.raises(InputError):
        cache.get(_key(0), bad)
    assert not cache.busy and not cache.entries
    cache.get(_key(0), lambda: _value(rng, 8))
    assert cache.computed == 1
