"""Run AMD Quark 0.13's own MXFP4 export on a tiny Llama (CPU) in a child interpreter.

Quark's ``ModelQuantizer`` -> ``freeze`` -> ``export_safetensors`` with ``MXFP4Scheme`` (weights
static MXFP4, ``scale_calculation_mode: "even"``), ``lm_head`` excluded. The MLP weights are set
to adversarial values first: ties between E2M1 values at many binades, negative values that
round to zero, all-zero groups, groups whose amax is at the bottom of the float range.

Usage (what the test runs)::

    python quark_export.py OUT_DIR   # writes OUT_DIR/source.safetensors and OUT_DIR/out/...
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def adversarial(shape: tuple[int, int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 0.5, 1.0, 1.5, 2.0, 3.0])
    pick = ties[torch.randint(0, len(ties), shape, generator=g)]
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    binade = 2.0 ** torch.randint(-20, 10, (shape[0], 1), generator=g).float()
    w = pick * sign * binade
    noise = torch.randn(shape, generator=g) * 0.02
    w[::3] = noise[::3]  # ordinary rows too
    w[1, :] = 0.0  # all-zero groups
    w[2, :64] = -(torch.rand(64, generator=g) * 0.1)  # negatives around a large one: round to 0
    w[2, 0] = -6.0
    w[4, :32] = 2.0**-125  # amax at the bottom of the float range
    w[5, :32] = 2.0**-130
    return w.to(torch.bfloat16)


def main(out: Path) -> None:
    from quark.torch import ModelQuantizer, export_safetensors
    from quark.torch.quantization.config.config import QConfig
    from quark.torch.quantization.config.template import MXFP4Scheme
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=32,
        head_dim=128,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    mlp = model.model.layers[0].mlp
    with torch.no_grad():
        for seed, lin in enumerate((mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
            lin.weight.copy_(adversarial(tuple(lin.weight.shape), seed))
    save_file(
        {k: v.contiguous().clone() for k, v in model.state_dict().items()},
        str(out / "source.safetensors"),
    )
    quantizer = ModelQuantizer(
        QConfig(global_quant_config=MXFP4Scheme().config, exclude=["lm_head"])
    )
    model = quantizer.freeze(quantizer.quantize_model(model, None))
    export_safetensors(model, str(out / "out"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
