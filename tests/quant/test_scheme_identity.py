"""One scheme identity: ``storage_identity`` (what the bytes are) and ``producer_identity``
(that, plus the scale names and the raw producer spec)."""

from __future__ import annotations

from checkpoint_tool.quant.configs.quark_spec import QuarkLayerSpec, scheme_from_spec
from checkpoint_tool.quant.scheme import Scheme


def quark(weight: dict, **extra: object) -> Scheme:
    return scheme_from_spec(QuarkLayerSpec.model_validate({"weight": weight, **extra}), "test")


BLOCK = {"dtype": "fp8_e4m3", "qscheme": "per_block", "block_size": [128, 128]}
MX = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
MX8 = {"dtype": "fp8_e4m3", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}


def test_specs_that_differ_only_in_an_irrelevant_key_store_the_same_bytes():
    a = quark({**MX, "observer_cls": "PerGroupMinMaxObserver"})
    b = quark({**MX, "observer_cls": "PerBlockMXObserver"}, output_tensors=None)
    assert a.spec != b.spec
    assert a.storage_identity() == b.storage_identity()
    assert a.producer_identity() != b.producer_identity()
    # the rule (why a scheme applies) is no part of either identity
    c = a.model_copy(update={"rule": "another rule", "source": "elsewhere"})
    assert (c.storage_identity(), c.producer_identity()) == (
        a.storage_identity(),
        a.producer_identity(),
    )


def test_block_group_and_scale_dtype_are_part_of_the_storage():
    base = quark(BLOCK)
    assert quark({**BLOCK, "block_size": [128, 64]}).storage_identity() != base.storage_identity()
    assert (
        quark({**BLOCK, "scale_type": "float32"}).storage_identity() != base.storage_identity()
    )  # F32 only vs any float scale dtype
    e8m0 = quark({**BLOCK, "scale_format": "e8m0"})
    assert e8m0.storage_identity() != base.storage_identity()
    mx = quark(MX)
    assert mx.model_copy(update={"group_size": 64}).storage_identity() != mx.storage_identity()
    assert quark(MX8).storage_identity() != mx.storage_identity()  # same groups, other weight
    # the scale's name is not what the bytes are
    renamed = mx.model_copy(update={"scale_suffix": "scale"})
    assert renamed.storage_identity() == mx.storage_identity()
    assert renamed.producer_identity() != mx.producer_identity()
