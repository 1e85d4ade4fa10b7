"""``layers.fastread.TensorReader`` reads what ``catalog.reader.read_tensor`` reads, from
several threads, and names the file of a truncated shard."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.reader import read_tensor
from checkpoint_tool.errors import InputError
from checkpoint_tool.layers.fastread import TensorReader


@pytest.mark.parametrize("preset", ["quark-mxfp4", "deepseek-v3-fp8", "quark-nvfp4"])
def test_same_tensors_as_read_tensor(converted, preset: str) -> None:
    src, dst = converted(preset, tp=2)
    dtypes: set[str] = set()
    for root in (src, dst):
        cat = open_catalog(str(root), headers_only=False)
        reader = TensorReader(cat)
        names = sorted(cat.tensors)
        entries = [cat.get(n) for n in names]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(reader.read, entries))
        reader.close()
        for name, t in zip(names, got, strict=True):
            want = read_tensor(cat, name)
            dtypes.add(cat.get(name).dtype)
            assert t.dtype == want.dtype and t.shape == want.shape, name
            assert torch.equal(t.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
    assert len(dtypes) >= 2


def test_truncated_shard_names_the_file(converted, dst_copy) -> None:
    _, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    cat = open_catalog(str(bad), headers_only=False)
    last = max(cat.tensors.values(), key=lambda e: (e.file, e.end))
    shard = cat.path_of(last)
    with open(shard, "r+b") as fh:
        fh.truncate(last.end - 10)
    with pytest.raises(InputError, match="truncated"):
        TensorReader(cat).read(last)
