"""``TensorTable`` / ``TableTensors``: the columnar catalog gives back exactly what the
headers record, as a read-only mapping in file then header order."""

from __future__ import annotations

import re

import pytest

from catalog.producer_ckpt import quark_checkpoint
from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.safetensors_format import TensorEntry, read_header
from checkpoint_tool.catalog.table import TableTensors, TensorTable
from checkpoint_tool.errors import InputError

STEM = "mxfp4-global_ptpc-fp8-attn"


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    root = quark_checkpoint(tmp_path_factory.mktemp("t") / "q", STEM, shards=3, seed=3)
    return root, open_catalog(root)


def _reference(root, files):
    """name -> TensorEntry from each header's own ``tensors`` (not the table), in order."""
    out: dict[str, TensorEntry] = {}
    for rel in files:
        for name, e in read_header(root / rel).tensors.items():
            out[name] = e._replace(file=rel)
    return out


def test_mapping_view_equals_the_headers_in_order(opened):
    root, cat = opened
    ref = _reference(root, cat.files)
    assert isinstance(cat.tensors, TableTensors)
    assert list(cat.tensors) == list(ref) and list(cat.tensors.keys()) == list(ref)
    assert list(cat.tensors.items()) == list(ref.items())
    assert list(cat.tensors.values()) == list(ref.values())
    assert len(cat.tensors) == len(ref) and dict(cat.tensors) == ref
    for name, e in ref.items():
        assert cat.tensors[name] == e and cat.tensors.get(name) == e and name in cat.tensors
        assert type(cat.tensors[name].shape) is tuple
    assert cat.tensors.get("nope") is None and "nope" not in cat.tensors
    with pytest.raises(KeyError):
        cat.tensors["nope"]


def test_bulk_methods_agree_with_the_records(opened):
    _, cat = opened
    table = cat.table
    for rel in cat.files:
        rows = table.rows_of_file(rel)
        assert [e.name for e in table.entries(rows)] == [
            n for n, e in cat.tensors.items() if e.file == rel
        ]
    assert table.rows_of_file("missing.safetensors") == range(0)
    assert table.total_bytes() == sum(e.nbytes for e in cat.tensors.values())
    pat = re.compile(r"\.experts\.\d+\.down_proj\.")
    assert table.names_matching(pat) == [n for n in cat.tensors if pat.search(n)]
    by_name = list(table.entries_by_name())
    assert by_name == [cat.tensors[n] for n in sorted(cat.tensors)]
    assert [e.name for e in by_name] != list(cat.tensors)  # file order is not name order here


def test_from_entries_round_trips_and_plain_mappings_get_a_table(opened):
    _, cat = opened
    again = TableTensors(TensorTable.from_entries(cat.tensors.values()))
    assert list(again.items()) == list(cat.tensors.items())
    reversed_cat = type(cat)(root=cat.root, tensors=dict(reversed(cat.tensors.items())), files=[])
    assert (
        [n for n, _, _ in reversed_cat.table.name_dtype_shape()]
        == list(reversed(cat.tensors))
        == list(reversed(list(cat.tensors)))
    )
    assert list(reversed(cat.tensors.values())) == list(reversed(list(cat.tensors.values())))


def test_duplicate_name_across_files_is_refused(opened):
    root, cat = opened
    header = read_header(root / cat.files[0])
    parts = [("a.safetensors", header.columns), ("b.safetensors", header.columns)]
    with pytest.raises(
        InputError, match=r"/b\.safetensors: tensor .* also appears in a\.safetensors; duplicate"
    ):
        TensorTable.from_headers(parts, where=root)


def test_add_tensors_appends_new_records(opened):
    root, _ = opened
    cat = open_catalog(root)
    first = next(iter(cat.tensors.values()))
    extra = first._replace(name="extra.weight")
    cat.add_tensors([extra])
    assert (
        cat.tensors["extra.weight"] == extra
        and len(cat.tensors) == len(_reference(root, cat.files)) + 1
    )


# -- name order and the names made a block at a time --

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from checkpoint_tool.catalog import table as table_module  # noqa: E402


def _table(names: list[str]) -> TensorTable:
    return TensorTable.from_entries(
        TensorEntry(n, "s.safetensors", "U8", (1,), 8 + k, 9 + k) for k, n in enumerate(names)
    )


NAMES = st.one_of(
    st.from_regex(r"[a-z.0-9]{0,12}", fullmatch=True),
    # NUL, é, 𝔘, ... (not lone surrogates: the header reader refuses those names)
    st.text(
        alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)),
        max_size=8,
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(NAMES, max_size=40, unique=True), st.integers(1, 5))
def test_by_name_is_sorted_and_iter_names_is_the_names(names, block):
    """``by_name`` (a fixed-width array sort, or ``sorted`` for NULs and very long names)
    orders rows as ``sorted`` orders the names; ``iter_names`` gives them in row order, a
    small block at a time here."""
    table = _table(names)
    assert table.by_name().tolist() == sorted(range(len(names)), key=names.__getitem__)
    saved, table_module.NAME_BLOCK = table_module.NAME_BLOCK, block
    try:
        assert list(table.iter_names()) == names
    finally:
        table_module.NAME_BLOCK = saved


def test_by_name_orders_prefixes_and_long_names_as_sorted_does():
    names = ["a.b", "a", "a.b.c", "b" * 3000, "a0", "a.", "é", "e"]
    assert _table(names).by_name().tolist() == sorted(range(8), key=names.__getitem__)
    assert _table(names[:3] + names[4:]).by_name().tolist() == sorted(
        range(7), key=(names[:3] + names[4:]).__getitem__
    )
