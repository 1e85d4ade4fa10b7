"""HashedOutput: staged bytes and zero-copy runs in any mix give the right file and sha256."""

from __future__ import annotations

import errno
import hashlib
import os
import random

import pytest

from checkpoint_tool.execute import hashed_output
from checkpoint_tool.execute.hashed_output import HashedOutput


@pytest.fixture
def source(tmp_path):
    data = random.Random(11).randbytes(20_000)
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def _write(tmp_path, fd_src, data, ops, capacity):
    """Apply ``ops`` (("stage", bytes) | ("copy", offset, n)); return (file bytes, size, sha)."""
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    out = HashedOutput(fd, capacity)
    expected = bytearray()
    for op in ops:
        if op[0] == "stage":
            chunk = op[1]
            pos = 0
            while pos < len(chunk):
                n = min(capacity, len(chunk) - pos)
                out.reserve(n)[:] = chunk[pos : pos + n]
                out.advance(n)
                pos += n
            expected += chunk
        else:
            _, offset, n = op
            out.copy_range(fd_src, offset, n, "src.bin")
            expected += data[offset : offset + n]
    size, sha = out.finish()
    os.close(fd)
    return path.read_bytes(), bytes(expected), size, sha


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("zero_copy_min", [1, 500, 1 << 30])
def test_random_mix_of_staged_and_copied_ranges(tmp_path, source, monkeypatch, seed, zero_copy_min):
    fd_src, data = source
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", zero_copy_min)
    monkeypatch.setattr(hashed_output, "MAX_RUN", 3000)
    rng = random.Random(seed)
    ops, pos = [], rng.randrange(1000)
    for _ in range(40):
        if rng.random() < 0.3:
            ops.append(("stage", rng.randbytes(rng.randrange(1, 400))))
        else:
            n = rng.randrange(1, 900)
            if rng.random() < 0.3 or pos + n > len(data):
                pos = rng.randrange(len(data) - n)  # a jump: the next run starts elsewhere
            ops.append(("copy", pos, n))
            pos += n
    capacity = rng.choice([64, 257, 4096])
    got, expected, size, sha = _write(tmp_path, fd_src, data, ops, capacity)
    assert got == expected
    assert size == len(expected) and sha == hashlib.sha256(expected).hexdigest()


def test_refused_copy_file_range_falls_back_to_pread(tmp_path, source, monkeypatch):
    fd_src, data = source
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", 1)

    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    ops = [("copy", 0, 5000), ("stage", b"abc"), ("copy", 7000, 9000)]
    got, expected, _, sha = _write(tmp_path, fd_src, data, ops, 1024)
    assert got == expected and sha == hashlib.sha256(expected).hexdigest()


def test_write_errors_surface_at_the_next_call(tmp_path, source, monkeypatch):
    fd_src, _ = source
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", 1)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", full)
    fd = os.open(tmp_path / "o", os.O_RDWR | os.O_CREAT, 0o644)
    out = HashedOutput(fd, 128)
    out.copy_range(fd_src, 0, 1000, "src.bin")
    with pytest.raises(OSError) as err:
        out.finish()
    assert err.value.errno == errno.ENOSPC
    os.close(fd)


def test_hash_left_running_across_runs_stays_in_file_order(tmp_path, source, monkeypatch):
    """A copy leaves its last window's hash running while the next operation starts; a slow
    hash must still be folded in file order (short non-adjacent runs, staged bytes between)."""
    import time

    fd_src, data = source
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", 64)
    real = HashedOutput._hash_written

    def slow(self, offset, nbytes):
        time.sleep(0.002)
        real(self, offset, nbytes)

    monkeypatch.setattr(HashedOutput, "_hash_written", slow)
    rng = random.Random(5)
    ops = []
    for _ in range(40):
        offset = rng.randrange(0, 19_000)
        ops.append(("copy", offset, rng.randrange(64, 1000)))
        if rng.random() < 0.3:
            ops.append(("stage", rng.randbytes(rng.randrange(1, 300))))
    got, expected, size, sha = _write(tmp_path, fd_src, data, ops, capacity=256)
    assert got == expected and size == len(expected)
    assert sha == hashlib.sha256(expected).hexdigest()


def test_every_writeback_request_is_done_when_finish_returns(tmp_path, source, monkeypatch):
    """Write-back requests run on their own thread; finish() waits for them, so the caller may
    close the descriptor at once (a late request would fail on the closed descriptor)."""
    import time

    fd_src, data = source
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", 64)
    done: list[tuple[int, int]] = []

    def slow_kick(fd, offset, nbytes):
        time.sleep(0.003)
        os.fstat(fd)  # EBADF once the descriptor is closed
        done.append((offset, nbytes))

    monkeypatch.setattr(hashed_output, "_start_writeback", slow_kick)
    ops = [("copy", 100, 900), ("stage", b"x" * 500), ("copy", 5000, 3000), ("copy", 9000, 70)]
    got, expected, size, _ = _write(tmp_path, fd_src, data, ops, capacity=256)
    assert got == expected
    covered = 0
    for offset, nbytes in sorted(done):
        assert offset == covered
        covered += nbytes
    assert covered == size


def test_buffers_are_page_mappings_not_heap(tmp_path, source):
    """The staging and read buffers are mappings of their own (``execute.pages``): malloc's
    moving mmap threshold could otherwise carve them from a heap that keeps their pages."""
    import tracemalloc

    from checkpoint_tool.execute.source import GrowingBuffer

    _, data = source
    capacity = 4 << 20
    tracemalloc.start()
    try:
        fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        out = HashedOutput(fd, capacity)
        for _ in range(3):  # both staging buffers filled and written
            out.reserve(capacity)[:8] = data[:8]
            out.advance(capacity)
        read = GrowingBuffer(capacity).view(capacity)
        read[:8] = data[:8]
        _, peak = tracemalloc.get_traced_memory()
        out.finish()
        os.close(fd)
    finally:
        tracemalloc.stop()
    assert peak < capacity // 2, f"{peak} bytes on the Python heap for {capacity}-byte buffers"
    assert (tmp_path / "out.bin").read_bytes() == 3 * (data[:8] + bytes(capacity - 8))
