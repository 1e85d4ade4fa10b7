"""Small synthetic layouts of published MoE checkpoints: config.json and tensor specs with the
producer's names (sizes shrunk), for the family tests. Each builder cites the vLLM file that
reads the layout.

Example::

    config, tensors = qwen3_next(fp8=True)
    write_checkpoint(tmp_path / "src", tensors, config)
"""

from __future__ import annotations

Tensors = dict[str, tuple[str, tuple[int, ...]]]

H, I, E = 128, 128, 4


def _fp8_block(tensors: Tensors, name: str, shape: tuple[int, int], block: int = 128) -> None:
    """An FP8 block-quantized linear: E4M3 weight + F32 ``weight_scale_inv`` per block."""
    tensors[f"{name}.weight"] = ("F8_E4M3", shape)
    tensors[f"{name}.weight_scale_inv"] = (
        "F32",
        (-(-shape[0] // block), -(-shape[1] // block)),
    )


def _linear(tensors: Tensors, name: str, shape: tuple[int, int], fp8: bool) -> None:
    if fp8:
        _fp8_block(tensors, name, shape)
    else:
        tensors[f"{name}.weight"] = ("BF16", shape)


def _swiglu(tensors: Tensors, base: str, width: int, fp8: bool, names=("gate_proj", "up_proj", "down_proj")) -> None:
    g, u, d = names
    _linear(tensors, f"{base}.{g}", (width, H), fp8)
    _linear(tensors, f"{base}.{u}", (width, H), fp8)
    _linear(tensors, f"{base}.{d}", (H, width), fp8)


def _qwen_moe_block(tensors: Tensors, mlp: str, fp8: bool, moe_i: int, shared_i: int) -> None:
    tensors[f"{mlp}.gate.weight"] = ("BF16", (E, H))
    tensors[f"{mlp}.shared_expert_gate.weight"] = ("BF16", (1, H))
    for e in range(E):
        _swiglu(tensors, f"{mlp}.experts.{e}", moe_i, fp8)
    _swiglu(tensors, f"{mlp}.shared_expert", shared_i, fp8)


FP8_QC = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
    "modules_to_not_convert": ["lm_head", "mtp.fc"],
}


def qwen3_next(
    *,
    fp8: bool = False,
    layers: int = 2,
    mtp: bool = True,
    moe_i: int = I,
    mtp_moe_i: int | None = None,
    mtp_shared_i: int | None = None,
    shared_i: int | None = None,
) -> tuple[dict, Tensors]:
    """Qwen3-Next-80B-A3B's layout: every layer MoE with a gated shared expert, and one MTP
    layer under ``mtp.layers.0`` although config.json has no MTP count key (vLLM
    ``qwen3_next_mtp.py`` ``Qwen3NextMultiTokenPredictor.__init__``:
    ``getattr(config, "num_nextn_predict_layers", 1)``; ``Qwen3NextMTP.load_weights`` renames
    ``mtp.`` to ``model.``)."""
    config: dict = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "num_experts": E,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": moe_i,
        "shared_expert_intermediate_size": moe_i,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "vocab_size": 128,
    }
    if fp8:
        config["quantization_config"] = dict(FP8_QC)
    t: Tensors = {"model.embed_tokens.weight": ("BF16", (128, H)), "lm_head.weight": ("BF16", (128, H))}
    t["model.norm.weight"] = ("BF16", (H,))
    for i in range(layers):
        t[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", (H,))
        _qwen_moe_block(t, f"model.layers.{i}.mlp", fp8, moe_i, shared_i or moe_i)
    if mtp:
        t["mtp.fc.weight"] = ("BF16", (H, 2 * H))
        t["mtp.norm.weight"] = ("BF16", (H,))
        t["mtp.pre_fc_norm_embedding.weight"] = ("BF16", (H,))
        t["mtp.pre_fc_norm_hidden.weight"] = ("BF16", (H,))
        t["mtp.layers.0.input_layernorm.weight"] = ("BF16", (H,))
        _qwen_moe_block(
            t, "mtp.layers.0.mlp", fp8, mtp_moe_i or moe_i, mtp_shared_i or mtp_moe_i or moe_i
        )
    return config, t
