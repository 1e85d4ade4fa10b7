"""vLLM's own loader judges ckpt's FP4 / FP8 / fused-shared-expert outputs on a CPU.

The ``ckpt_engine_judge`` plugin (``engine_judge/``; docs/vllm-proof.md lists its patches)
replaces hardware-capability decisions only — kernel / backend choice, the FSE *request*, a
cuda allocation — so vLLM 0.32's unmodified weight loaders, name and expert mapping, online
FSE redirection (shared expert -> slot ``n_routed``) and TP slicing run here. Every load is
snapshotted per TP rank before ``process_weights_after_loading``.

For each cell of the matrix below: ``ckpt convert`` the synth source; load the output and the
source through the same engine (FSE requested for ``--target vllm-0.33-rocm-aiter-fse``, as
that target serves); every parameter of the output equals the source's byte for byte, padded
regions hold zero codes (their scales finite); in the HF layout every (parameter, shard) and
every expert slot of every MoE layer is written exactly once (the sharded_state loader
checks its keys itself). All loads share one child process (vLLM starts once).

A covering subset of checkpoint x TP x layout x FSE x padding (each value of each axis with
each checkpoint where the engine builds it; docs/vllm-proof.md has the table and what is
left out): ``CELLS``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from judge_checks import refold_shared, resliced_parameters, same_parameters, written_once

from checkpoint_tool.vllm_run.judge import JudgeJob, run_judge

FSE_TARGET = "vllm-0.33-rocm-aiter-fse"


@dataclass(frozen=True)
class Cell:
    """One conversion: ``fse`` = convert for (and serve as) the ROCm AITER FSE target."""

    preset: str
    tp: int
    layout: str = "hf"
    fse: bool = False
    pad: int | None = None
    #: synth options of the source, e.g. (("moe_intermediate", 256),)
    opts: tuple = ()

    @property
    def id(self) -> str:
        pad = f"-pad{self.pad}" if self.pad else ""
        opts = "".join(f"-{k}{v}" for k, v in self.opts)
        return (
            f"{self.preset}{opts}-tp{self.tp}-{self.layout}-{'fse' if self.fse else 'stock'}{pad}"
        )

    @property
    def source(self) -> tuple:
        return (self.preset, self.opts)

    def convert_args(self) -> list[str]:
        args = ["--tp", str(self.tp)]
        if self.layout != "hf":
            args += ["--layout", self.layout]
        if self.fse:
            args += ["--target", FSE_TARGET]
        if self.pad:
            args += ["--pad-to", str(self.pad)]
        return args

    def out_job(self, path: Path) -> JudgeJob:
        fmt = "sharded_state" if self.layout == "vllm-sharded" else "auto"
        return JudgeJob(str(path), self.tp, fmt, self.fse)

    def src_job(self, path: Path) -> JudgeJob:
        return JudgeJob(str(path), self.tp, "auto", self.fse)


CELLS = [
    Cell("quark-mxfp4", 1, "hf", fse=True),
    Cell("quark-mxfp4", 1, "hf", fse=True, pad=256),
    Cell("quark-mxfp4", 2, "vllm-sharded", fse=True),
    Cell("quark-mxfp4", 2, "hf", fse=False, pad=256),
    Cell("quark-mxfp4", 1, "vllm-sharded", fse=False),
    Cell("quark-nvfp4", 1, "hf", fse=True),
    Cell("quark-nvfp4", 2, "vllm-sharded", fse=False, pad=256),
    Cell("quark-hybrid", 1, "hf", fse=True),
    Cell("quark-hybrid", 1, "hf", fse=False),
    Cell("quark-hybrid", 2, "vllm-sharded", fse=False),
    Cell("modelopt-nvfp4", 1, "hf", fse=True),
    Cell("modelopt-nvfp4", 2, "hf", fse=False, pad=256),
    Cell("deepseek-v3-fp8", 1, "hf", fse=True),
    # per-tensor FP8 (BF16 weight_scale, static input_scale): vLLM's online FSE path crashes
    Cell("quark-fp8-per-tensor", 1, "hf", fse=True),
    # I 256: 128 per rank, one FP8 block
    Cell("deepseek-v3-fp8", 2, "vllm-sharded", fse=False, opts=(("moe_intermediate", 256),)),
    # I 128: vLLM refuses the source at TP 2 (64 rows per rank, half a block); ckpt pads
    Cell("deepseek-v3-fp8", 2, "hf", fse=False),
    # DeepSeek-V4-Flash (vLLM's CPU DeepseekV4 model; no V4.1 engram tables there, and its
    # CPU MoE never fuses: is_fused_shared_expert_enabled = False, models/deepseek_v4/cpu)
    Cell("deepseek-v4", 1, "hf", opts=(("engram", False),)),
    # I 128: vLLM refuses the source at TP 2 (block FP8 shared expert); ckpt pads to 256
    Cell("deepseek-v4", 2, "hf", opts=(("engram", False),)),
    # compressed-tensors (Qwen3-MoE, no shared expert): FP8 per channel and NVFP4 with its
    # [1] global scales, TP 1 and 2, NVFP4 padded too. W4A16 (pack-quantized INT4) is left
    # out: vLLM 0.32's CPU build has no WNA16 MoE backend (docs/vllm-proof.md)
    Cell("qwen3-moe-fp8-dynamic", 1, "hf"),
    Cell("qwen3-moe-fp8-dynamic", 2, "hf"),
    Cell("qwen3-moe-nvfp4", 1, "hf"),
    Cell("qwen3-moe-nvfp4", 2, "hf"),
    Cell("qwen3-moe-nvfp4", 2, "hf", pad=256),
]


@pytest.fixture(scope="module")
def judged(vllm_python, synth_ckpt, converted, tmp_path_factory) -> dict:
    """``{("out", cell) | ("src", preset, tp, fse): JudgeResult}``: every load, one child."""
    jobs: dict = {}
    for cell in CELLS:
        src = synth_ckpt(cell.preset, **dict(cell.opts))
        jobs[("out", cell)] = cell.out_job(converted(src, *cell.convert_args()))
        for tp in sorted({1, cell.tp}):  # TP 1: the resliced reference of TP 2 cells
            jobs[("src", cell.source, tp, cell.fse)] = JudgeJob(str(src), tp, "auto", cell.fse)
            if cell.fse:  # unfused: refold_shared, where vLLM's online FSE path crashes
                jobs[("src", cell.source, tp, False)] = JudgeJob(str(src), tp, "auto")
    base = Cell("quark-mxfp4", 1, "hf", fse=True)
    work = tmp_path_factory.mktemp("planted")
    out = converted(synth_ckpt(base.preset), *base.convert_args())
    for name, plant in PLANTED.items():
        jobs[("planted", name)] = base.out_job(plant(out, synth_ckpt(base.preset), work / name))
    keys = sorted(jobs, key=lambda k: (jobs[k].tp, str(k)))  # TP 1 first: fewest spawns
    results = run_judge(
        [jobs[k] for k in keys], python=vllm_python, work=tmp_path_factory.mktemp("judge")
    )
    return dict(zip(keys, results, strict=True))


def _swap_experts(out: Path, src: Path, dst: Path) -> Path:
    """ckpt's output with the down_proj of routed experts 3 and 4 of layer 1 swapped."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(out, dst)
    a, b = (f"model.layers.1.mlp.experts.{e}.down_proj.weight" for e in (3, 4))
    for shard in sorted(dst.glob("*.safetensors")):
        tensors = load_file(str(shard))
        if a in tensors:
            tensors[a], tensors[b] = tensors[b], tensors[a]
            save_file(tensors, str(shard), metadata={"format": "pt"})
    return dst


def _shared_twice(out: Path, src: Path, dst: Path) -> Path:
    """ckpt's output (shared experts of layer 1 in slot 8) plus the source's
    ``mlp.shared_experts`` tensors of layer 1, which vLLM's FSE redirection loads into slot
    8 as well."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(out, dst)
    extra = {}
    for shard in sorted(src.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for name in f.keys():
                if name.startswith("model.layers.1.mlp.shared_experts."):
                    extra[name] = f.get_tensor(name)
    assert extra
    save_file(extra, str(dst / "model-planted.safetensors"), metadata={"format": "pt"})
    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update(dict.fromkeys(extra, "model-planted.safetensors"))
    index_path.write_text(json.dumps(index))
    return dst


#: planted faults, each loaded like the quark-mxfp4 TP 1 FSE cell: the checks must catch them
PLANTED = {"swapped_experts": _swap_experts, "shared_twice": _shared_twice}


def test_a_swapped_expert_is_caught(judged):
    """Control: two routed experts' down_proj swapped in ckpt's output still load, and the
    byte comparison names the parameter."""
    planted = judged[("planted", "swapped_experts")]
    src = judged[("src", ("quark-mxfp4", ()), 1, True)]
    assert planted.loaded, planted.failure_text()
    with pytest.raises(AssertionError, match=r"layers\.1\.mlp\.experts\.routed_experts\.w2_weight"):
        same_parameters(planted.ranks[0], src.ranks[0])


def test_a_slot_written_twice_is_caught(judged):
    """Control: slot 8 of layer 1 written by ckpt's tensors and again by vLLM's redirection
    of the source's shared expert: the write counts say so."""
    planted = judged[("planted", "shared_twice")]
    assert planted.loaded, planted.failure_text()
    with pytest.raises(AssertionError, match="written more than once"):
        written_once(planted.ranks[0])


def _ckpt_fse_layers(out: Path) -> list[int]:
    return json.loads((out / "config.json").read_text()).get("ckpt", {}).get("fse_layers", [])


#: FSE cells whose *source* vLLM's online FSE redirection crashes on (0-d NVFP4
#: weight_scale_2 / input_scale_2, per-tensor FP8 scales of the shared experts: IndexError at
#: ``loaded_weight.shape[split_dim]``, deepseek_v2.py load_weights): their output is compared
#: with the unfused load of the source, refolded (``refold_shared``)
SOURCE_FSE_CRASHES = {
    "quark-nvfp4": "IndexError: tuple index out of range",
    # 0-d weight_scale / input_scale of per-tensor FP8 shared experts: the same line
    "quark-fp8-per-tensor": "IndexError: tuple index out of range",
}
N_ROUTED = 8  # the tiny presets' routed experts

#: cells whose load vLLM refuses, and the reason it gives (the source refuses the same way)
REFUSED = {
    # per-layer mixed shared-expert schemes: vLLM's gate fuses layer 3 only, then refuses
    # the mix all-or-nothing (fused_moe/utils.py is_model_fused_shared_expert_compatible)
    "quark-hybrid-tp1-hf-fse": "NotImplementedError: Fused shared experts must be enabled for all MoE layers",
}  # fmt: skip


def _reference(judged: dict, cell: Cell, tp: int):  # type: ignore[no-untyped-def]
    """What vLLM builds from the source at ``tp`` with the cell's FSE request: its own
    online path, or (``SOURCE_FSE_CRASHES``) its unfused load refolded; None where vLLM
    refuses the source at that TP."""
    src = judged[("src", cell.source, tp, cell.fse)]
    if cell.fse and cell.preset in SOURCE_FSE_CRASHES:
        assert not src.loaded and SOURCE_FSE_CRASHES[cell.preset] in (src.error or ""), (
            "vLLM's online FSE path now loads this source: compare with it directly\n"
            + src.failure_text()
        )
        unfused = judged[("src", cell.source, tp, False)]
        assert unfused.loaded, unfused.failure_text()
        return unfused.__class__(
            unfused.job, True, None, [refold_shared(r, N_ROUTED) for r in unfused.ranks]
        )
    return src if src.loaded else None


#: TP 2 sources vLLM refuses, and why: compared with the source loaded at TP 1, resliced
REFUSED_AT_TP2 = {
    # block-FP8 attention: q_b_proj / kv_b_proj output rows per rank 64 < block_n 128
    ("quark-hybrid", ()): "not divisible by weight quantization block_n = 128",
    # block-FP8 experts, I 128: 64 input columns of w2 per rank < block_k 128
    ("deepseek-v3-fp8", ()): "not divisible by weight quantization block_k = 128",
    # block-FP8 shared expert, I 128: the same
    ("deepseek-v4", (("engram", False),)): "not divisible by weight quantization block_k = 128",
}


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_parameters_equal_what_vllm_builds_from_the_source(judged, cell):
    """Byte for byte: TP 1 against the source's load; TP 2 rank by rank against vLLM's own
    TP 2 load of the source (unpadded cells) and against its TP 1 load resliced the way
    vLLM splits each layer (every cell: padding is added to the whole intermediate before
    vLLM splits it, so a padded rank holds other rows than an unpadded one)."""
    out = judged[("out", cell)]
    if cell.id in REFUSED:
        src = judged[("src", cell.source, cell.tp, cell.fse)]
        assert not out.loaded and REFUSED[cell.id] in (out.error or ""), out.failure_text()
        assert not src.loaded and REFUSED[cell.id] in (src.error or ""), src.failure_text()
        return
    assert out.loaded, out.failure_text()
    ref = _reference(judged, cell, cell.tp)
    if cell.tp > 1 and cell.source in REFUSED_AT_TP2:
        refused = judged[("src", cell.source, cell.tp, cell.fse)]
        assert ref is None and REFUSED_AT_TP2[cell.source] in (refused.error or ""), (
            refused.failure_text()
        )
    else:
        assert ref is not None, "the source did not load"
    compared = 0
    if ref is not None and (cell.tp == 1 or not cell.pad):
        for rank, (a, b) in enumerate(zip(out.ranks, ref.ranks, strict=True)):
            compared += same_parameters(a, b, what=f"{cell.id} rank {rank}")
    if cell.tp > 1:
        full = _reference(judged, cell, 1)
        assert full is not None, "the source did not load at TP 1"
        for rank, a in enumerate(out.ranks):
            compared += resliced_parameters(a, full.ranks[0], rank, cell.tp, what=cell.id)
    assert compared >= 40 * cell.tp
    if ref is not None and not (cell.fse and cell.preset in SOURCE_FSE_CRASHES):
        assert out.ranks[0].fse_layers == ref.ranks[0].fse_layers


@pytest.mark.parametrize(
    "cell", [c for c in CELLS if c.tp > 1 and c.source not in REFUSED_AT_TP2], ids=lambda c: c.id
)
def test_the_reslice_rule_is_vllms_own_tp_split(judged, cell):
    """``resliced_parameters`` (the TP 1 load split per layer kind) == vLLM's own TP 2 load
    of the same source, rank by rank: the rule the padded and refused cells rest on."""
    two = _reference(judged, cell, cell.tp)
    one = _reference(judged, cell, 1)
    assert two is not None and one is not None
    for rank, a in enumerate(two.ranks):
        resliced_parameters(a, one.ranks[0], rank, cell.tp, what=f"{cell.id} source")


@pytest.mark.parametrize(
    "cell", [c for c in CELLS if c.layout == "hf" and c.id not in REFUSED], ids=lambda c: c.id
)
def test_every_expert_slot_is_written_exactly_once(judged, cell):
    """Per rank: each (parameter, shard) and each expert slot (fused ones included) written
    once, and exactly the parameters the source's load writes."""
    out = judged[("out", cell)]
    assert out.loaded, out.failure_text()
    src = judged[("src", cell.source, cell.tp, cell.fse)]
    if not src.loaded:  # vLLM refuses the source here: the TP 1 load names the parameters
        src = judged[("src", cell.source, 1, cell.fse)]
    crashed = cell.fse and cell.preset in SOURCE_FSE_CRASHES
    for rank in out.ranks:
        written_once(rank, None if crashed else src.ranks[0])


FSE_CELLS = [c for c in CELLS if c.fse]


@pytest.mark.parametrize("cell", FSE_CELLS, ids=lambda c: c.id)
def test_ckpt_fuses_exactly_the_layers_vllms_gate_fuses(judged, converted, synth_ckpt, cell):
    """ckpt's per-layer FSE decision (what it wrote: ``config.json`` ``ckpt.fse_layers``) ==
    vLLM's own per-layer gate (``resolve_layer_fused_shared_expert``) on the source."""
    src = judged[("src", cell.source, cell.tp, cell.fse)]
    gate = src.gate
    assert gate, f"vLLM's FSE gate was never asked: {src.failure_text()}"
    assert all(isinstance(v, bool) for v in gate.values()), gate
    vllm_fused = sorted(int(p.split(".")[-2]) for p, v in gate.items() if v)
    out = converted(synth_ckpt(cell.preset, **dict(cell.opts)), *cell.convert_args())
    mixed = 0 < len(vllm_fused) < len(gate)
    # the MTP layer (index num_hidden_layers) is built only for speculative decoding, which
    # the judge does not run: its FSE decision is not judged here
    n_layers = json.loads((out / "config.json").read_text())["num_hidden_layers"]
    ckpt_fused = [n for n in _ckpt_fse_layers(out) if n < n_layers]
    # all-or-nothing: a mix is refused by vLLM, so ckpt fuses none of them
    assert ckpt_fused == ([] if mixed else vllm_fused)


@pytest.mark.parametrize(
    "cell",
    [c for c in FSE_CELLS if c.preset not in SOURCE_FSE_CRASHES and c.id not in REFUSED],
    ids=lambda c: c.id,
)
def test_refold_equals_vllms_own_redirection(judged, cell):
    """The reference used where vLLM's online FSE path crashes (the unfused load, shared MLP
    appended as slot n_routed) equals vLLM's own FSE redirection wherever that runs."""
    fused = judged[("src", cell.source, cell.tp, True)]
    unfused = judged[("src", cell.source, cell.tp, False)]
    assert fused.loaded and unfused.loaded, fused.failure_text() + unfused.failure_text()
    if not fused.ranks[0].fse_model:
        assert not any(fused.ranks[0].gate.values())  # vLLM's gate fused no layer here
        same_parameters(fused.ranks[0], unfused.ranks[0], what=f"{cell.id} not fused")
        return
    for a, b in zip(fused.ranks, unfused.ranks, strict=True):
        same_parameters(a, refold_shared(b, N_ROUTED), what=f"{cell.id} refold")


def _will_load(path: Path, tp: int) -> tuple[bool, str]:
    """(will_load, the error findings) as ``ckpt inspect PATH --target FSE_TARGET --tp N``."""
    from typer.testing import CliRunner

    from checkpoint_tool.cli.app import app

    result = CliRunner().invoke(
        app, ["inspect", str(path), "--target", FSE_TARGET, "--tp", str(tp), "--format", "json"]
    )
    assert result.exit_code in (0, 1), result.output
    engine = json.loads(result.stdout)["engine"]
    errors = [
        f"[{f['rule']}] {f['message']}" for f in engine["findings"] if f["severity"] == "error"
    ]
    return engine["summary"]["will_load"], "; ".join(errors)


@pytest.mark.parametrize("cell", FSE_CELLS, ids=lambda c: c.id)
@pytest.mark.parametrize("which", ["source", "output"])
def test_inspect_will_load_matches_the_judged_load(judged, converted, synth_ckpt, cell, which):
    """``ckpt inspect --target vllm-0.33-rocm-aiter-fse``'s will_load == whether vLLM's own
    loader (FSE requested, capability-patched) loads it: the source through vLLM's online
    redirection, and ckpt's output."""
    src_path = synth_ckpt(cell.preset, **dict(cell.opts))
    if which == "output" and cell.layout != "hf":
        pytest.skip("inspect reads HF layouts; ckpt verify checks a vllm-sharded one's keys")
    if which == "source":
        path, real = src_path, judged[("src", cell.source, cell.tp, True)]
    else:
        path, real = converted(src_path, *cell.convert_args()), judged[("out", cell)]
    will_load, why = _will_load(path, cell.tp)
    assert will_load == real.loaded, (
        f"ckpt says will_load={will_load} ({why}); vLLM loaded={real.loaded}: "
        f"{real.failure_text()[-3000:]}"
    )
