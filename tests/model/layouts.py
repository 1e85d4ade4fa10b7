"""Small synthetic layouts of published MoE checkpoints: config.json and tensor specs with the
producer's names (sizes shrunk), for the family tests. Each builder cites the vLLM file that
reads the layout.

Example::

    config, tensors = qwen3_next(fp8=True)
    write_checkpoint(tmp_path / "src", tensors, config)
"""

from __future__ import annotations

Tensors = dict[str, tuple[str, tuple[int, ...]]]

H, INTER, E = 128, 128, 4


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


def _swiglu(
    tensors: Tensors, base: str, width: int, fp8: bool, names=("gate_proj", "up_proj", "down_proj")
) -> None:
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
    moe_i: int = INTER,
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
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "lm_head.weight": ("BF16", (128, H)),
    }
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


def _mxfp4(tensors: Tensors, name: str, shape: tuple[int, int]) -> None:
    """A Quark MXFP4 linear: packed U8 weight [out, in/2] + E8M0 scale [out, in/32]."""
    tensors[f"{name}.weight"] = ("U8", (shape[0], shape[1] // 2))
    tensors[f"{name}.weight_scale"] = ("U8", (shape[0], shape[1] // 32))


def deepseek_mxfp4_bf16_mtp(quark_qc: dict, *, layers: int = 4) -> tuple[dict, Tensors]:
    """amd/DeepSeek-R1-0528-MXFP4's layout: MXFP4 routed and shared experts on the main MoE
    layers (1..layers-1 here), the MTP layer ``model.layers.{layers}`` left BF16 by an
    exact-name exclude list (vLLM ``deepseek_v2.py`` ``DeepseekV2DecoderLayer``: MoE when
    ``layer_idx >= first_k_dense_replace``; ``deepseek_mtp.py`` builds
    ``num_nextn_predict_layers`` layers after ``num_hidden_layers``)."""
    n_routed, moe_i = E * 2, INTER
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "first_k_dense_replace": 1,
        "n_routed_experts": n_routed,
        "n_shared_experts": 1,
        "moe_intermediate_size": moe_i,
        "num_experts_per_tok": 2,
        "num_nextn_predict_layers": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "vocab_size": 128,
    }
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "lm_head.weight": ("BF16", (128, H)),
    }
    t["model.norm.weight"] = ("BF16", (H,))
    exclude = ["lm_head"]
    for i in range(layers + 1):
        base = f"model.layers.{i}"
        t[f"{base}.input_layernorm.weight"] = ("BF16", (H,))
        if i == 0:
            _swiglu(t, f"{base}.mlp", 2 * moe_i, False)
            exclude += [f"{base}.mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
            continue
        t[f"{base}.mlp.gate.weight"] = ("BF16", (n_routed, H))
        t[f"{base}.mlp.gate.e_score_correction_bias"] = ("F32", (n_routed,))
        exclude.append(f"{base}.mlp.gate")
        mtp = i == layers
        experts = [f"{base}.mlp.experts.{e}" for e in range(n_routed)]
        for mod in [*experts, f"{base}.mlp.shared_experts"]:
            for proj, shape in (
                ("gate_proj", (moe_i, H)),
                ("up_proj", (moe_i, H)),
                ("down_proj", (H, moe_i)),
            ):
                if mtp:
                    t[f"{mod}.{proj}.weight"] = ("BF16", shape)
                    exclude.append(f"{mod}.{proj}")
                else:
                    _mxfp4(t, f"{mod}.{proj}", shape)
        if mtp:
            for leaf in ("enorm", "hnorm", "shared_head.norm"):
                t[f"{base}.{leaf}.weight"] = ("BF16", (H,))
            t[f"{base}.eh_proj.weight"] = ("BF16", (H, 2 * H))
            exclude.append(f"{base}.eh_proj")
    qc = {**quark_qc, "exclude": exclude}
    qc.pop("layer_quant_config", None)
    config["quantization_config"] = qc
    return config, t


def minimax_m3(*, wrapper: bool = True, layers: int = 4, fp8: bool = False) -> tuple[dict, Tensors]:
    """MiniMax-M3's layout (vLLM ``models/minimax_m3/amd/model.py``): the first 3 layers dense
    (``moe_layer_freq``), MoE layers under ``block_sparse_moe`` with routed ``experts.E.w1/w3/w2``
    and a shared MLP ``shared_experts.gate_proj/up_proj/down_proj`` (``intermediate_size *
    n_shared_experts`` wide, ``MiniMaxM3MoE.__init__``); one MTP layer at
    ``model.mtp.layers.0`` (``nvidia/mtp.py`` ``_map_checkpoint_name``). The multimodal
    checkpoint nests it all under ``language_model.`` with the sizes in ``text_config``."""
    text = {
        "model_type": "minimax_m3_text",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "num_local_experts": E,
        "num_experts_per_tok": 2,
        "intermediate_size": INTER,
        "dense_intermediate_size": 2 * INTER,
        "n_shared_experts": 1,
        "moe_layer_freq": [0] * 3 + [1] * (layers - 3),
        "num_mtp_modules": 1,
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
        "vocab_size": 128,
        "num_attention_heads": 2,
    }
    if wrapper:
        config: dict = {
            "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
            "model_type": "minimax_m3_vl",
            "text_config": text,
        }
        root = "language_model.model"
    else:
        config = {"architectures": ["MiniMaxM3SparseForCausalLM"], **text}
        root = "model"
    head = "language_model.lm_head.weight" if wrapper else "lm_head.weight"
    if fp8:
        config["quantization_config"] = dict(
            FP8_QC, modules_to_not_convert=[head[: -len(".weight")]]
        )
    t: Tensors = {f"{root}.embed_tokens.weight": ("BF16", (128, H)), head: ("BF16", (128, H))}
    t[f"{root}.norm.weight"] = ("BF16", (H,))

    def moe(base: str) -> None:
        t[f"{base}.block_sparse_moe.gate.weight"] = ("F32", (E, H))
        t[f"{base}.block_sparse_moe.e_score_correction_bias"] = ("F32", (E,))
        for e in range(E):
            _swiglu(t, f"{base}.block_sparse_moe.experts.{e}", INTER, fp8, ("w1", "w3", "w2"))
        _swiglu(t, f"{base}.block_sparse_moe.shared_experts", INTER, fp8)

    for i in range(layers):
        base = f"{root}.layers.{i}"
        t[f"{base}.input_layernorm.weight"] = ("BF16", (H,))
        if i < 3:
            _swiglu(t, f"{base}.mlp", 2 * INTER, fp8)
        else:
            moe(base)
    mtp = f"{root}.mtp.layers.0"
    t[f"{mtp}.eh_proj.weight"] = ("BF16", (H, 2 * H))
    t[f"{mtp}.enorm.weight"] = ("BF16", (H,))
    t[f"{mtp}.hnorm.weight"] = ("BF16", (H,))
    t[f"{mtp}.final_layernorm.weight"] = ("BF16", (H,))
    moe(mtp)
    if fp8:
        config["quantization_config"]["modules_to_not_convert"].append(f"{mtp}.eh_proj")
    return config, t


def llama4(*, wrapper: bool = True, layers: int = 2, step: int = 1) -> tuple[dict, Tensors]:
    """Llama-4 Scout's layout (``interleave_moe_layer_step`` 1; Maverick 2): BF16, routed
    experts as 3-D tensors ``experts.gate_up_proj`` [E, H, 2I] and ``experts.down_proj``
    [E, INTER, H] (vLLM ``llama4.py`` ``load_moe_expert_weights`` transposes and chunks them), a
    ``shared_expert`` MLP, ``router``; the multimodal checkpoint under ``language_model.``."""
    text = {
        "model_type": "llama4_text",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "num_local_experts": E,
        "num_experts_per_tok": 1,
        "intermediate_size": INTER,
        "intermediate_size_mlp": 2 * INTER,
        "interleave_moe_layer_step": step,
        "vocab_size": 128,
    }
    if wrapper:
        config: dict = {
            "architectures": ["Llama4ForConditionalGeneration"],
            "model_type": "llama4",
            "text_config": text,
        }
        root, head = "language_model.model", "language_model.lm_head.weight"
    else:
        config = {"architectures": ["Llama4ForCausalLM"], **text}
        root, head = "model", "lm_head.weight"
    t: Tensors = {f"{root}.embed_tokens.weight": ("BF16", (128, H)), head: ("BF16", (128, H))}
    t[f"{root}.norm.weight"] = ("BF16", (H,))
    for i in range(layers):
        ff = f"{root}.layers.{i}.feed_forward"
        t[f"{root}.layers.{i}.input_layernorm.weight"] = ("BF16", (H,))
        if (i + 1) % step:
            _swiglu(t, ff, 2 * INTER, False)
            continue
        t[f"{ff}.router.weight"] = ("BF16", (E, H))
        t[f"{ff}.experts.gate_up_proj"] = ("BF16", (E, H, 2 * INTER))
        t[f"{ff}.experts.down_proj"] = ("BF16", (E, INTER, H))
        _swiglu(t, f"{ff}.shared_expert", INTER, False)
    return config, t


def _deepseek_like(
    config: dict, root: str, moe: list[int], mtp: int, *, shared: int = 1
) -> Tensors:
    """Tensors of a DeepSeek-style decoder: mlp.experts.E.gate_proj, mlp.shared_experts (one
    MLP ``shared x moe_intermediate_size`` wide), mlp.gate; dense mlp elsewhere; ``mtp`` MoE
    layers continuing the layer list."""
    n_layers = config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"]
    t: Tensors = {f"{root}.embed_tokens.weight": ("BF16", (128, H))}
    for i in range(n_layers + mtp):
        mlp = f"{root}.layers.{i}.mlp"
        t[f"{root}.layers.{i}.input_layernorm.weight"] = ("BF16", (H,))
        if i < n_layers and i not in moe:
            _swiglu(t, mlp, 2 * INTER, False)
            continue
        t[f"{mlp}.gate.weight"] = ("BF16", (E, H))
        t[f"{mlp}.gate.e_score_correction_bias"] = ("F32", (E,))
        for e in range(E):
            _swiglu(t, f"{mlp}.experts.{e}", INTER, False)
        if shared:
            _swiglu(t, f"{mlp}.shared_experts", shared * INTER, False)
    return t


def glm5_next(*, layers: int = 4) -> tuple[dict, Tensors]:
    """GLM-5-Next's layout (vLLM ``models/glm5next/common/model.py``): the multimodal
    wrapper's text model under ``model.language_model.``, MoE by ``mlp_layer_types``
    ("sparse"), one MTP layer after the decoder's (``common/mtp.py``)."""
    text = {
        "model_type": "glm5_next_text",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "n_routed_experts": E,
        "n_shared_experts": 1,
        "moe_intermediate_size": INTER,
        "num_experts_per_tok": 2,
        "mlp_layer_types": ["dense"] + ["sparse"] * (layers - 1),
        "num_nextn_predict_layers": 1,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "vocab_size": 128,
    }
    config = {
        "architectures": ["Glm5NextForConditionalGeneration"],
        "model_type": "glm5_next",
        "text_config": text,
    }
    t = _deepseek_like(config, "model.language_model", list(range(1, layers)), 1)
    t["lm_head.weight"] = ("BF16", (128, H))
    return config, t


def axk1(*, layers: int = 4, layer_types: bool = False) -> tuple[dict, Tensors]:
    """AXK1's layout (vLLM ``model_executor/models/AXK1.py``): DeepSeek-style, MoE from
    ``first_k_dense_replace`` (or ``mlp_layer_types`` when the config has it)."""
    config: dict = {
        "architectures": ["AXK1ForCausalLM"],
        "model_type": "axk1",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "n_routed_experts": E,
        "n_shared_experts": 1,
        "moe_intermediate_size": INTER,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "vocab_size": 128,
    }
    if layer_types:
        config["mlp_layer_types"] = ["dense", "dense"] + ["sparse"] * (layers - 2)
    moe = list(range(2 if layer_types else 1, layers))
    t = _deepseek_like(config, "model", moe, 0)
    t["lm_head.weight"] = ("BF16", (128, H))
    return config, t


def longcat_flash(*, layers: int = 2) -> tuple[dict, Tensors]:
    """LongCat-Flash's layout (vLLM ``model_executor/models/longcat_flash.py``):
    ``num_layers`` decoder layers, each with dense ``mlps.0`` / ``mlps.1`` and a MoE ``mlp``
    routed by ``mlp.router.classifier`` (experts plus weightless zero experts), no shared
    expert."""
    zero = 2
    config = {
        "architectures": ["LongcatFlashForCausalLM"],
        "model_type": "longcat_flash",
        "hidden_size": H,
        "num_layers": layers,
        "num_hidden_layers": 2 * layers,
        "n_routed_experts": E,
        "zero_expert_num": zero,
        "zero_expert_type": "identity",
        "moe_intermediate_size": INTER,
        "moe_topk": 2,
        "vocab_size": 128,
    }
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "lm_head.weight": ("BF16", (128, H)),
    }
    for i in range(layers):
        base = f"model.layers.{i}"
        for k in range(2):
            _swiglu(t, f"{base}.mlps.{k}", 2 * INTER, False)
        t[f"{base}.mlp.router.classifier.weight"] = ("F32", (E + zero, H))
        t[f"{base}.mlp.router.e_score_correction_bias"] = ("F32", (E + zero,))
        for e in range(E):
            _swiglu(t, f"{base}.mlp.experts.{e}", INTER, False)
    return config, t


def qwen4_exp(*, layers: int = 2) -> tuple[dict, Tensors]:
    """Qwen4-exp's layout (vLLM ``models/qwen4_exp/amd/model.py``): Qwen3-Next's MoE block on
    every layer, ``mlp.shared_expert`` with its gate, one MTP layer under ``mtp.layers.0``
    with no count key (``amd/mtp.py``: ``getattr(config, "mtp_num_hidden_layers", 1)``)."""
    config, t = qwen3_next(layers=layers)
    config.update(architectures=["Qwen4ExpForCausalLM"], model_type="qwen4_exp_text")
    for key in ("decoder_sparse_step", "mlp_only_layers"):
        config.pop(key)
    return config, t


def minimax_m2(*, layers: int = 2) -> tuple[dict, Tensors]:
    """MiniMax-M2.5's layout (vLLM ``model_executor/models/minimax_m2.py``; no family row, the
    generic detector reads it): every layer MoE under ``block_sparse_moe``, experts
    ``w1/w3/w2`` ``intermediate_size`` wide (``MiniMaxM2MoE``: FusedMoE
    ``intermediate_size=config.intermediate_size``), block FP8 with ``"fmt":
    "float8_e4m3fn"``, which vLLM's ``Fp8Config.from_config`` never reads."""
    config = {
        "architectures": ["MiniMaxM2ForCausalLM"],
        "model_type": "minimax_m2",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "num_local_experts": E,
        "num_experts_per_tok": 2,
        "intermediate_size": INTER,
        "scoring_func": "sigmoid",
        "vocab_size": 128,
        "quantization_config": dict(
            FP8_QC, fmt="float8_e4m3fn", modules_to_not_convert=["lm_head"]
        ),
    }
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "lm_head.weight": ("BF16", (128, H)),
    }
    for i in range(layers):
        moe = f"model.layers.{i}.block_sparse_moe"
        t[f"{moe}.gate.weight"] = ("BF16", (E, H))
        t[f"{moe}.e_score_correction_bias"] = ("F32", (E,))
        for e in range(E):
            _swiglu(t, f"{moe}.experts.{e}", INTER, True, ("w1", "w3", "w2"))
    return config, t


def ernie45_moe(*, layers: int = 4) -> tuple[dict, Tensors]:
    """ERNIE-4.5-21B-A3B-PT's layout (vLLM ``model_executor/models/ernie45_moe.py``): layer 0
    dense, MoE from ``moe_layer_start_index`` to ``moe_layer_end_index`` every
    ``moe_layer_interval``, experts ``mlp.experts.E.*``, ``moe_num_shared_experts`` shared
    experts as one ``mlp.shared_experts`` MLP, top k ``moe_k``, and the correction bias
    ``mlp.moe_statics.e_score_correction_bias`` ``[1, E]`` (``_preprocess`` renames and
    squeezes it)."""
    config = {
        "architectures": ["Ernie4_5_MoeForCausalLM"],
        "model_type": "ernie4_5_moe",
        "hidden_size": H,
        "num_hidden_layers": layers,
        "intermediate_size": 2 * INTER,
        "moe_num_experts": E,
        "moe_num_shared_experts": 2,
        "moe_intermediate_size": INTER,
        "moe_k": 2,
        "moe_layer_start_index": 1,
        "moe_layer_end_index": layers - 2,
        "moe_layer_interval": 1,
        "vocab_size": 128,
        "tie_word_embeddings": True,
    }
    t: Tensors = {"model.embed_tokens.weight": ("BF16", (128, H))}
    for i in range(layers):
        mlp = f"model.layers.{i}.mlp"
        if not 1 <= i <= layers - 2:
            _swiglu(t, mlp, 2 * INTER, False)
            continue
        t[f"{mlp}.gate.weight"] = ("BF16", (E, H))
        t[f"{mlp}.moe_statics.e_score_correction_bias"] = ("F32", (1, E))
        for e in range(E):
            _swiglu(t, f"{mlp}.experts.{e}", INTER, False)
        _swiglu(t, f"{mlp}.shared_experts", 2 * INTER, False)
    return config, t


def gpt_oss(*, layers: int = 2) -> tuple[dict, Tensors]:
    """openai/gpt-oss-20b's layout (vLLM ``model_executor/models/gpt_oss.py``): every layer MoE,
    router ``mlp.router`` with a bias, experts as 3-D MXFP4 ``mlp.experts.gate_up_proj_blocks``
    U8 ``[E, 2I, H/32, 16]`` (gate/up rows interleaved), ``_scales`` U8 ``[E, 2I, H/32]``,
    ``_bias`` BF16 ``[E, 2I]`` and the ``down_proj`` triple, attention with biases and
    ``self_attn.sinks``, ``quant_method: mxfp4`` with ``modules_to_not_convert``."""
    heads, kv, hd = 4, 2, 32
    config = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_hidden_layers": layers,
        "num_local_experts": E,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "swiglu_limit": 7.0,
        "vocab_size": 128,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
    }
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "model.norm.weight": ("BF16", (H,)),
        "lm_head.weight": ("BF16", (128, H)),
    }
    for i in range(layers):
        base = f"model.layers.{i}"
        t[f"{base}.input_layernorm.weight"] = ("BF16", (H,))
        t[f"{base}.post_attention_layernorm.weight"] = ("BF16", (H,))
        for proj, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            t[f"{base}.self_attn.{proj}.weight"] = ("BF16", (rows, H))
            t[f"{base}.self_attn.{proj}.bias"] = ("BF16", (rows,))
        t[f"{base}.self_attn.o_proj.weight"] = ("BF16", (H, heads * hd))
        t[f"{base}.self_attn.o_proj.bias"] = ("BF16", (H,))
        t[f"{base}.self_attn.sinks"] = ("BF16", (heads,))
        t[f"{base}.mlp.router.weight"] = ("BF16", (E, H))
        t[f"{base}.mlp.router.bias"] = ("BF16", (E,))
        ex = f"{base}.mlp.experts"
        t[f"{ex}.gate_up_proj_blocks"] = ("U8", (E, 2 * INTER, H // 32, 16))
        t[f"{ex}.gate_up_proj_scales"] = ("U8", (E, 2 * INTER, H // 32))
        t[f"{ex}.gate_up_proj_bias"] = ("BF16", (E, 2 * INTER))
        t[f"{ex}.down_proj_blocks"] = ("U8", (E, H, INTER // 32, 16))
        t[f"{ex}.down_proj_scales"] = ("U8", (E, H, INTER // 32))
        t[f"{ex}.down_proj_bias"] = ("BF16", (E, H))
    return config, t


def bailing_moe(*, layers: int = 3, first_dense: int = 1) -> tuple[dict, Tensors]:
    """inclusionAI/Ling-lite-1.5's layout (vLLM ``model_executor/models/bailing_moe.py``):
    layers below ``first_k_dense_replace`` dense, the rest MoE with experts ``mlp.experts.E.*``
    and ``num_shared_experts`` shared experts as one ``mlp.shared_experts`` MLP, attention as
    one ``attention.query_key_value`` and ``attention.dense``, embeddings
    ``model.word_embeddings``."""
    heads, kv, hd = 4, 2, 32
    config = {
        "architectures": ["BailingMoeForCausalLM"],
        "model_type": "bailing_moe",
        "hidden_size": H,
        "intermediate_size": 2 * INTER,
        "moe_intermediate_size": INTER,
        "num_hidden_layers": layers,
        "first_k_dense_replace": first_dense,
        "num_experts": E,
        "num_experts_per_tok": 2,
        "num_shared_experts": 2,
        "norm_topk_prob": True,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "use_bias": False,
        "use_qkv_bias": False,
        "vocab_size": 128,
    }
    t: Tensors = {
        "model.word_embeddings.weight": ("BF16", (128, H)),
        "model.norm.weight": ("BF16", (H,)),
        "lm_head.weight": ("BF16", (128, H)),
    }
    for i in range(layers):
        base = f"model.layers.{i}"
        t[f"{base}.attention.query_key_value.weight"] = ("BF16", ((heads + 2 * kv) * hd, H))
        t[f"{base}.attention.dense.weight"] = ("BF16", (H, heads * hd))
        mlp = f"{base}.mlp"
        if i < first_dense:
            _swiglu(t, mlp, 2 * INTER, False)
            continue
        t[f"{mlp}.gate.weight"] = ("BF16", (E, H))
        for e in range(E):
            _swiglu(t, f"{mlp}.experts.{e}", INTER, False)
        _swiglu(t, f"{mlp}.shared_experts", 2 * INTER, False)
    return config, t


def hunyuan_v1_moe(*, layers: int = 2) -> tuple[dict, Tensors]:
    """tencent/Hunyuan-A13B-Instruct's layout (vLLM 0.33 serves it by the Transformers backend
    over transformers' ``modeling_hunyuan_v1_moe.py``): every layer MoE, router
    ``mlp.gate.wg``, experts ``mlp.experts.E.*`` and one ``mlp.shared_mlp``, both
    ``intermediate_size`` wide; ``moe_intermediate_size`` / ``moe_topk`` / ``num_shared_expert``
    as lists per layer, QK norm ``self_attn.query_layernorm`` / ``key_layernorm``."""
    heads, kv, hd = 4, 2, 32
    config = {
        "architectures": ["HunYuanMoEV1ForCausalLM"],
        "model_type": "hunyuan_v1_moe",
        "hidden_size": H,
        "intermediate_size": INTER,
        "moe_intermediate_size": [INTER] * layers,
        "moe_topk": [2] * layers,
        "num_shared_expert": [1] * layers,
        "num_hidden_layers": layers,
        "num_experts": E,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "attention_head_dim": hd,
        "use_mixed_mlp_moe": True,
        "use_qk_norm": True,
        "vocab_size": 128,
        "tie_word_embeddings": True,
    }
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "model.norm.weight": ("BF16", (H,)),
    }
    for i in range(layers):
        base = f"model.layers.{i}"
        for proj, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            t[f"{base}.self_attn.{proj}.weight"] = ("BF16", (rows, H))
        t[f"{base}.self_attn.o_proj.weight"] = ("BF16", (H, heads * hd))
        t[f"{base}.self_attn.query_layernorm.weight"] = ("BF16", (hd,))
        t[f"{base}.self_attn.key_layernorm.weight"] = ("BF16", (hd,))
        mlp = f"{base}.mlp"
        t[f"{mlp}.gate.wg.weight"] = ("BF16", (E, H))
        for e in range(E):
            _swiglu(t, f"{mlp}.experts.{e}", INTER, False)
        _swiglu(t, f"{mlp}.shared_mlp", INTER, False)
    return config, t


def dots1(*, layers: int = 3) -> tuple[dict, Tensors]:
    """rednote-hilab/dots.llm1.inst's layout (vLLM 0.33 serves it by the Transformers backend
    over transformers' ``modeling_dots1.py``): layer 0 dense, then MoE with router
    ``mlp.gate`` and its ``e_score_correction_bias``, experts ``mlp.experts.E.*`` and
    ``n_shared_experts`` shared experts as one ``mlp.shared_experts`` MLP."""
    config = {
        "architectures": ["Dots1ForCausalLM"],
        "model_type": "dots1",
        "hidden_size": H,
        "intermediate_size": 2 * INTER,
        "moe_intermediate_size": INTER,
        "num_hidden_layers": layers,
        "first_k_dense_replace": 1,
        "n_routed_experts": E,
        "n_shared_experts": 2,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "vocab_size": 128,
    }
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", (128, H)),
        "lm_head.weight": ("BF16", (128, H)),
    }
    for i in range(layers):
        mlp = f"model.layers.{i}.mlp"
        if i < 1:
            _swiglu(t, mlp, 2 * INTER, False)
            continue
        t[f"{mlp}.gate.weight"] = ("BF16", (E, H))
        t[f"{mlp}.gate.e_score_correction_bias"] = ("F32", (E,))
        for e in range(E):
            _swiglu(t, f"{mlp}.experts.{e}", INTER, False)
        _swiglu(t, f"{mlp}.shared_experts", 2 * INTER, False)
    return config, t


#: family -> a builder of one of its published layouts (families without a synth preset)
LAYOUTS = {
    "ernie4_5_moe": ernie45_moe,
    "gpt_oss": gpt_oss,
    "minimax_m3": minimax_m3,
    "llama4": llama4,
    "glm5_next": glm5_next,
    "axk1": axk1,
    "longcat_flash": longcat_flash,
    "bailing_moe": bailing_moe,
    "hunyuan_v1_moe": hunyuan_v1_moe,
    "dots1": dots1,
}
