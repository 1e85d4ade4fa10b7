"""The one owner of storage arithmetic (``catalog.safetensors_format``) and its independent twin.

``verify.expected.storage_geometry`` is deliberately written apart (the verifier must not share
the executor's code); these tests hold the two to the same answers, and pin the owner's
refusal of a sub-byte last dim that does not fill whole bytes (the planner used to floor it,
the reader and executor to ceil it).
"""

from __future__ import annotations

import itertools

import pytest

from checkpoint_tool.catalog.safetensors_format import (
    DTYPE_BITS,
    element_bytes,
    header_shape,
    storage_layout,
    storage_shape,
    tensor_nbytes,
)
from checkpoint_tool.errors import InputError
from checkpoint_tool.verify.expected import storage_geometry

SHAPES = [(8, 64), (3, 5, 16), (128,), (2, 1, 8)]


@pytest.mark.parametrize(("dtype", "shape"), list(itertools.product(sorted(DTYPE_BITS), SHAPES)))
def test_owner_agrees_with_the_independent_verifier(dtype, shape):
    assert storage_layout(dtype, shape) == storage_geometry(dtype, shape)


@pytest.mark.parametrize(("dtype", "shape"), list(itertools.product(sorted(DTYPE_BITS), SHAPES)))
def test_storage_bytes_equal_the_header_bytes_and_round_trip(dtype, shape):
    storage, item = storage_layout(dtype, shape)
    n = 1
    for d in storage:
        n *= d
    assert n * item == tensor_nbytes(dtype, shape)
    assert item == element_bytes(dtype)
    assert header_shape(dtype, storage) == list(shape)


def test_packed_examples():
    assert storage_shape("F4", [8, 64]) == (8, 32)
    assert storage_shape("F6_E2M3", [8, 64]) == (8, 48)
    assert storage_layout("BF16", [8, 64]) == ((8, 64), 2)
    assert storage_layout("F32", []) == ((), 4)


@pytest.mark.parametrize(("dtype", "shape"), [("F4", (8, 7)), ("F6_E3M2", (2, 5))])
def test_a_last_dim_of_partial_bytes_is_refused_with_the_tensor_name(dtype, shape):
    with pytest.raises(InputError, match=r"'model\.layers\.1\.w'"):
        storage_shape(dtype, shape, name="model.layers.1.w")
