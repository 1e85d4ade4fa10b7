"""The value scan skips the holes of a sparse file and counts them as the zeros they read as:
every count equals numpy's on the file's bytes read whole (the independent reference)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from checkpoint_tool.catalog.byte_range import read_range
from checkpoint_tool.catalog.safetensors_format import TensorEntry
from checkpoint_tool.catalog.sparse import pieces
from checkpoint_tool.validate.scales import scan_fp8_nan_codes, scan_values

MB = 1 << 20


def sparse_file(path: Path, size: int, rng: np.random.Generator, dtype: str) -> list[int]:
    """A file of ``size`` bytes, holes but for three random runs of data; returns their
    starts. The data runs hold scales of ``dtype`` (a few bad values among them)."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    starts = sorted(int(x) for x in rng.integers(0, size - 70_000, 3))
    fd = os.open(path, os.O_WRONLY)
    try:
        for start in starts:
            n = int(rng.integers(1, 65_536))
            if dtype == "U8":
                data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            elif dtype == "F8_E4M3":
                data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            else:
                x = rng.standard_normal(n // 4 + 1).astype(np.float32)
                x[rng.integers(0, x.size, 3)] = np.nan
                data = x.tobytes()[:n]
            os.pwrite(fd, data, start)
    finally:
        os.close(fd)
    return starts


def ctx_of(path: Path, chunk: int) -> SimpleNamespace:
    catalog = SimpleNamespace(
        store=None,
        path_of=lambda entry: path,
        read_bytes=lambda file, begin, end: read_range(path, begin, end),
    )
    return SimpleNamespace(catalog=catalog, options=SimpleNamespace(chunk_bytes=chunk))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", ["U8", "F8_E4M3", "F32"])
def test_scan_of_a_sparse_file_counts_as_reading_it_whole(
    tmp_path: Path, seed: int, dtype: str
) -> None:
    rng = np.random.default_rng(seed)
    path = tmp_path / "shard.safetensors"
    size = 3 * MB + int(rng.integers(0, 4096))
    sparse_file(path, size, rng, dtype)
    begin = int(rng.integers(1, 9000))  # any offset: holes are cut to whole elements
    itemsize = 4 if dtype == "F32" else 1
    n = (size - begin) // itemsize
    entry = TensorEntry("t", "shard.safetensors", dtype, (n,), begin, begin + n * itemsize)
    raw = path.read_bytes()[entry.begin : entry.end]
    ctx = ctx_of(path, int(rng.integers(1000, MB)))
    if dtype == "U8":
        s = scan_values(ctx, entry, e8m0=True)  # type: ignore[arg-type]
        codes = np.frombuffer(raw, np.uint8)
        bad = np.flatnonzero(codes == 255)
        assert (s.total, s.nan) == (n, bad.size)
        assert s.first_bad == (int(bad[0]) if bad.size else None)
        return
    if dtype == "F8_E4M3":
        s = scan_fp8_nan_codes(ctx, entry)  # type: ignore[arg-type]
        codes = np.frombuffer(raw, np.uint8)
        assert (s.total, s.nan) == (n, int(((codes & 0x7F) == 0x7F).sum()))
        s = scan_values(ctx, entry, e8m0=False)  # type: ignore[arg-type]
        ref = np.frombuffer(raw, ml_dtypes.float8_e4m3fn).astype(np.float64)
    else:
        s = scan_values(ctx, entry, e8m0=False)  # type: ignore[arg-type]
        with np.errstate(invalid="ignore"):
            ref = np.frombuffer(raw, np.float32).astype(np.float64)
    assert s.total == n
    assert s.nan == int(np.isnan(ref).sum())
    assert s.zero == int((ref == 0).sum())
    assert s.negative == int((ref < 0).sum())
    assert s.first_zero == int(np.flatnonzero(ref == 0)[0])
    bad = np.flatnonzero(~np.isfinite(ref))
    assert s.first_bad == (int(bad[0]) if bad.size else None)


def test_pieces_cover_the_range_and_holes_are_whole_elements(tmp_path: Path) -> None:
    path = tmp_path / "f"
    sparse_file(path, 2 * MB, np.random.default_rng(7), "U8")
    fd = os.open(path, os.O_RDONLY)
    try:
        runs = pieces(fd, 3, 2 * MB - 5, elem=4)
    finally:
        os.close(fd)
    if len(runs) == 1:
        pytest.skip("this file system does not report holes (the scan then reads everything)")
    assert runs[0][0] == 3 and runs[-1][1] == 2 * MB - 5
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in itertools.pairwise(runs))
    data = path.read_bytes()
    for start, stop, is_data in runs:
        if not is_data:
            assert (start - 3) % 4 == 0 and (stop - start) % 4 == 0
            assert not any(data[start:stop])  # a hole reads as zeros
