"""ckpt on twins of published checkpoints: right, or refused only where vLLM refuses.

Each case file (``cases/*.yaml``) carries the checkpoint's layout and, under ``expect``, facts
written from vLLM's model files (family, MoE layers with MTP, routed and shared widths,
padding at a TP size, fused shared experts per target), each cited in the case's
``sources``. On the full-size twin (sparse) every ``--target`` of ``inspect``, ``plan``,
``convert --dry-run`` and ``validate`` run; on the tiny twin (real data) ``inspect``,
``convert --tp 2``, ``verify`` and ``validate`` of the output. A check a known defect breaks
is listed in the case's ``xfail`` (strict: it must fail until the defect is fixed).

Example of an ``expect`` block (expressions over the case's dims, per twin)::

    expect: {family: deepseek_v3, moe_layers: "K..N-1", mtp_layers: "N..N+M-1", n_routed: E,
             routed_width: I, shared_width: S*I, tp: 8, tiny_tp: 2,
             fse: {vllm-0.33: none, vllm-0.33-rocm-aiter-fse: all}}
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import twins

from checkpoint_tool.cli.app import main

TARGETS = ("vllm-0.33", "vllm-0.32", "vllm-0.33-rocm-aiter-fse", "vllm-per-layer-fse")
FULL_CHECKS = (*(f"inspect:{t}" for t in TARGETS), "plan", "convert-dry-run", "validate")
TINY_CHECKS = (
    "tiny-inspect",
    "tiny-convert",
    "tiny-verify",
    "tiny-validate",
    "tiny-output-consistent",
)
#: gate / up rows of a routed or shared expert: the width a loader allocates from config.json
ROUTED_ROWS = re.compile(r"\.experts\.\d+\.(gate_proj|up_proj|w1|w3)\.weight$")
SHARED_ROWS = re.compile(r"\.shared_experts?\.(gate_proj|up_proj|w1|w3)\.weight$")
#: the full-size twins' checks are marked slow: header-only (sparse files, no tensor data, no
#: platform-dependent numerics), seconds each and the largest share of the default run; the
#: support matrix's oldest and newest legs leave them out, `make test` runs them all


def ckpt(*argv: str) -> tuple[int, str]:
    """Exit code and stdout (+ stderr's one-line error) of ``ckpt *argv`` in this process,
    through the console entry point, so bad input exits 2 with its message as for a user."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["ckpt", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    finally:
        sys.argv = saved
    text = out.getvalue()
    return code, text if code == 0 else text + err.getvalue()


def why(out: str) -> str:
    """The errors of a JSON report (issues, engine findings, failed checks), else its tail."""
    try:
        doc = json.loads(out)
    except ValueError:
        return out[-3000:]
    if not isinstance(doc, dict):
        return out[-3000:]
    found = [
        f"{x.get('code') or x.get('rule') or x.get('id')}: {x.get('message', x.get('title', ''))[:300]}"
        for key in ("issues", "findings", "checks")
        for x in (doc.get(key) or []) + ((doc.get("engine") or {}).get(key) or [])
        if isinstance(x, dict)
        and (x.get("severity") == "error" or x.get("status") in ("failed", "error"))
    ]
    for check in doc.get("checks") or []:  # validate: the first findings of a failed check
        if isinstance(check, dict) and check.get("status") == "failed":
            found += [f"  {f.get('tensor')}: {f.get('message')}" for f in check["findings"][:3]]
    return "\n".join(found[:20]) or out[-3000:]


def error_codes(doc: dict) -> set[str]:
    """Codes of the error findings of an inspect report (policy and engine)."""
    found = list(doc.get("issues") or []) + list((doc.get("engine") or {}).get("findings") or [])
    return {
        str(x.get("code") or x.get("rule"))
        for x in found
        if isinstance(x, dict) and x.get("severity") == "error"
    }


def assert_verdict(code: int, out: str, exp: dict[str, Any], target: str) -> dict:
    """Exit 0, or exit 1 with exactly the refusals vLLM makes (``expect.refuse``: a list for
    every target, or ``{target: [codes]}`` where the refusal depends on the target's FSE)."""
    refuse_of = exp.get("refuse") or ()
    if isinstance(refuse_of, dict):
        refuse_of = refuse_of.get(target) or ()
    refuse = set(refuse_of)
    if not refuse:
        assert code == 0, why(out)
        return json.loads(out)
    doc = json.loads(out)
    assert code == 1 and error_codes(doc) == refuse, why(out)
    return doc


def _params(checks: tuple[str, ...]) -> list[Any]:
    out = []
    for name in twins.case_names():
        case = twins.load_case(name)
        if case.get("skip"):
            continue
        xfails = case.get("xfail") or {}
        for check in checks:
            marks: list[Any] = []
            if check in xfails:
                marks.append(pytest.mark.xfail(strict=True, reason=xfails[check]))
            if check in FULL_CHECKS:
                marks.append(pytest.mark.slow)
            out.append(pytest.param(name, check, id=f"{name}-{check}", marks=marks))
    return out


def expectations(name: str, size: str) -> dict[str, Any]:
    """The case's ``expect`` evaluated on the dims of the ``full`` or ``tiny`` twin."""
    case = twins.load_case(name)
    config, _, _, _ = twins.twin_files(case, size)
    env = twins.dims_of(case, config)
    raw = dict(case["expect"])
    raw.update(raw.pop(size, None) or {})
    raw.pop("full" if size == "tiny" else "tiny", None)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("moe_layers", "mtp_layers"):
            out[key] = [] if value in (None, "none") else twins._values(value, env)
        elif key in ("family", "fse", "fse_mtp", "notes", "refuse"):
            out[key] = value
        else:
            out[key] = twins._eval(value, env)
    return out


def _fse_layers(spec: Any, layers: list[int], env_layers: list[int]) -> list[int] | None:
    if spec is None:
        return None
    if spec == "none":
        return []
    if spec == "all":
        return list(layers)
    return [x for x in env_layers if x in spec]


def check_report(report: dict, exp: dict[str, Any], target: str) -> None:
    """The inspect report says what vLLM's source says about this checkpoint."""
    if "family" in exp:  # only families ckpt names in families.yaml; others are its fallback
        assert report["model"]["family"] == exp["family"]
    main = [x for x in report["moe_layers"] if not x["is_mtp"]]
    mtp = [x for x in report["moe_layers"] if x["is_mtp"]]
    assert [x["layer"] for x in main] == exp["moe_layers"], "main MoE layers"
    assert [x["layer"] for x in mtp] == exp.get("mtp_layers", []), "MTP MoE layers"
    for layer in report["moe_layers"]:
        where = f"layer {layer['layer']}"
        assert layer["n_routed"] == exp["n_routed"], where
        assert layer["routed"]["width"] == exp["routed_width"], where
        shared = layer.get("shared") or {}
        assert (shared.get("width") or 0) == exp["shared_width"], where
        if "padded_per_rank" in exp:
            assert layer["intermediate"]["padded_per_rank"] == exp["padded_per_rank"], where
    main_layers = [x["layer"] for x in main]
    want = _fse_layers((exp.get("fse") or {}).get(target), main_layers, main_layers)
    if want is not None:
        got = [x["layer"] for x in main if x["fse"]["enabled"]]
        assert got == want, f"FSE on the main model for {target}"
    mtp_layers = [x["layer"] for x in mtp]
    want = _fse_layers((exp.get("fse_mtp") or {}).get(target), mtp_layers, mtp_layers)
    if want is not None:
        got = [x["layer"] for x in mtp if x["fse"]["enabled"]]
        assert got == want, f"FSE on the MTP drafter for {target}"


@pytest.mark.parametrize(("name", "check"), _params(FULL_CHECKS))
def test_full_twin(name: str, check: str, twin: Callable[[str, str], Path], tmp_path: Path) -> None:
    src = twin(name, "full")
    exp = expectations(name, "full")
    tp = str(exp["tp"])
    if check.startswith("inspect:"):
        target = check.split(":", 1)[1]
        code, out = ckpt("inspect", str(src), "--tp", tp, "--target", target, "--format", "json")
        check_report(assert_verdict(code, out, exp, target), exp, target)
    elif check == "plan":
        code, out = ckpt("plan", str(src), "--tp", tp, "--format", "json")
        assert code == 0, why(out)
    elif check == "convert-dry-run":
        code, out = ckpt("convert", str(src), str(tmp_path / "out"), "--tp", tp, "--dry-run")
        assert code == 0, why(out)
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    elif check == "validate":
        code, out = ckpt("validate", str(src), "--format", "json")
        assert code == 0, why(out)


@pytest.fixture(scope="session")
def converted(
    twin: Callable[[str, str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], tuple[int, str, Path]]:
    cache: dict[str, tuple[int, str, Path]] = {}

    def make(name: str) -> tuple[int, str, Path]:
        if name not in cache:
            src = twin(name, "tiny")
            tp = str(expectations(name, "tiny")["tiny_tp"])
            dst = tmp_path_factory.mktemp(f"{name}-converted") / "out"
            code, out = ckpt("convert", str(src), str(dst), "--tp", tp)
            cache[name] = (code, out, dst)
        return cache[name]

    return make


@pytest.mark.parametrize(("name", "check"), _params(TINY_CHECKS))
def test_tiny_twin(
    name: str,
    check: str,
    twin: Callable[[str, str], Path],
    converted: Callable[[str], tuple[int, str, Path]],
) -> None:
    exp = expectations(name, "tiny")
    if check == "tiny-inspect":
        src = twin(name, "tiny")
        tp = str(exp["tiny_tp"])
        code, out = ckpt("inspect", str(src), "--tp", tp, "--format", "json")
        check_report(assert_verdict(code, out, exp, "vllm-0.33"), exp, "vllm-0.33")
        return
    code, out, dst = converted(name)
    assert code == 0, why(out)
    if check == "tiny-verify":
        code, out = ckpt("verify", str(dst), "--source", str(twin(name, "tiny")))
        assert code == 0, why(out)
    elif check == "tiny-validate":
        code, out = ckpt("validate", str(dst), "--format", "json")
        assert code == 0, why(out)
    elif check == "tiny-output-consistent":
        assert_widths_match_config(name, dst)


def _headers(folder: Path) -> dict[str, dict]:
    """Every tensor header of the safetensors files in ``folder`` (read here, not by ckpt)."""
    out: dict[str, dict] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with open(shard, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            out.update(json.loads(fh.read(n)))
    out.pop("__metadata__", None)
    return out


def assert_widths_match_config(name: str, out: Path) -> None:
    """ckpt's output agrees with its own config.json: every routed and shared expert (MTP
    blocks included) is as wide as the config it wrote says, which is what vLLM allocates."""
    case = twins.load_case(name)
    config = json.loads((out / "config.json").read_text())
    env = twins.dims_of(case, config)
    routed = twins._eval(case["expect"]["routed_width"], env)
    shared = twins._eval(case["expect"]["shared_width"], env)
    wrong = [
        f"{t}: {h['shape'][0]} rows, config.json says {want}"
        for t, h in _headers(out).items()
        for pattern, want in ((ROUTED_ROWS, routed), (SHARED_ROWS, shared))
        if pattern.search(t) and h["shape"][0] != want
    ]
    assert not wrong, "\n".join(wrong[:10])
