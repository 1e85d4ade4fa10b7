"""The requantizer's bytes equal AMD Quark 0.13's own MXFP4 export of the same BF16 weights.

Needs the ``quark`` extra (``pip install -e ".[quark]"``); Quark runs on CPU in a child process
(``quark_export.py``: ModelQuantizer -> freeze -> export_safetensors on a tiny Llama with
adversarial weights). The same weights also go through the independent codec path verify uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("quark", reason="AMD Quark is the `quark` extra: pip install -e '.[quark]'")
pytest.importorskip("transformers", reason="Quark's exporter needs transformers ('.[quark]')")

from safetensors.torch import load_file

from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4
from checkpoint_tool.requant.view import QUARK_MXFP4_SPEC
from checkpoint_tool.verify.requant import codec_mxfp4

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quark_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quark")
    script = Path(__file__).with_name("quark_export.py")
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
    return out


def _modules(exported: dict[str, torch.Tensor]) -> list[str]:
    return sorted(k[: -len(".weight_scale")] for k in exported if k.endswith(".weight_scale"))


def test_bytes_equal_quark_export(quark_out: Path) -> None:
    src = load_file(str(quark_out / "source.safetensors"))
    exported = load_file(str(next((quark_out / "out").glob("*.safetensors"))))
    modules = _modules(exported)
    assert {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"} <= set(modules)
    for m in modules:
        w, s = quantize_mxfp4(src[f"{m}.weight"])
        assert exported[f"{m}.weight"].dtype == torch.uint8
        assert torch.equal(w, exported[f"{m}.weight"]), m
        assert torch.equal(s, exported[f"{m}.weight_scale"]), m
        w2, s2 = codec_mxfp4(src[f"{m}.weight"].float())  # verify's independent path
        assert torch.equal(w2, w) and torch.equal(s2, s), m


def test_the_adversarial_cases_are_exercised(quark_out: Path) -> None:
    """Ties, negative zeros and tiny groups are really in the data (else the test proves less)."""
    src = load_file(str(quark_out / "source.safetensors"))
    load_file(str(next((quark_out / "out").glob("*.safetensors"))))
    m = "model.layers.0.mlp.gate_proj"
    w, s = quantize_mxfp4(src[f"{m}.weight"])
    assert int(s[1, 0]) == 1  # an all-zero group stores 2**-126 (byte 1), not 0
    assert int(s[4, 0]) == 1 and int(w[4, 0]) == 0x66  # elements scaled by 2**-127 still
    assert int(w[2, 1]) & 0x0F == 0  # a small negative rounds to +0, not to -0 (code 8)


def test_config_spec_is_what_quark_writes(quark_out: Path) -> None:
    config = json.loads((quark_out / "out" / "config.json").read_text())
    written = config["quantization_config"]["global_quant_config"]
    assert written == QUARK_MXFP4_SPEC
