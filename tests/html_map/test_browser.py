"""The HTML layer map in a real browser (headless Chromium, Debian's ``chromium`` package).

What Chromium lays out is checked against the report the page was drawn from: one column
per MoE layer (4 for quark-hybrid, 59 for the full-size R1 layout), every label inside its
cell (real glyph widths, not the estimate the renderer used), the page no wider than the
window, and a fused and an unfused layer told apart by the pixels of a screenshot.
Skips with the reason when Chromium is not installed (CI installs it: see .ci/run).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checkpoint_tool.cli.app import main
from checkpoint_tool.html.cells import FSE_FILL
from checkpoint_tool.html.policy_page import render_policy_html
from checkpoint_tool.policy import PolicyReport

from .browser import WINDOW, chromium, measure, pixel, screenshot

pytestmark = pytest.mark.skipif(
    chromium() is None,
    reason="Chromium not found (apt-get install -y chromium, or set CKPT_CHROMIUM): "
    "the HTML map is not checked in a browser",
)

#: a target that fuses per layer: the map then shows fused and unfused layers
PER_LAYER = ("--target", "vllm-per-layer-fse")

#: sub-pixel slack for glyph boxes (anti-aliasing rounds them outwards)
SLACK = 0.75


def _inspect(monkeypatch, capsys, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", ["ckpt", "inspect", *argv])
    with pytest.raises(SystemExit):
        main()
    return capsys.readouterr().out


def _page(monkeypatch, capsys, tmp_path, src, tp: str) -> tuple[PolicyReport, Path]:
    """The JSON of ``ckpt inspect`` and the page drawn from it (test_page.py shows that
    ``--format html`` prints exactly this page)."""
    report = PolicyReport.model_validate_json(
        _inspect(monkeypatch, capsys, str(src), "--tp", tp, *PER_LAYER, "--format", "json")
    )
    page = tmp_path / "policy.html"
    page.write_text(render_policy_html(report), encoding="utf-8")
    return report, page


def _check_layout(report: PolicyReport, geo: dict) -> dict:
    """The assertions shared by every page: returns the map's measurements."""
    (m,) = geo["maps"]
    layers = [x.layer for x in report.moe_layers]
    assert m["layers"] == m["columns"] == len(layers)
    heads = [c for c in m["cells"] if c["row"] == "layer"]
    # one visible header per layer, left to right in report order, side by side
    assert [c["layer"] for c in heads] == layers
    assert [c["label"] for c in heads] == [str(x) for x in layers]
    xs = [c["rect"]["x"] for c in heads]
    assert xs == sorted(xs) and len(set(xs)) == len(layers)
    assert all(c["rect"]["w"] >= 20 and c["rect"]["h"] >= 20 for c in heads)
    # every label inside its cell, with the glyph widths Chromium used
    drawn = [c for c in m["cells"] if c["label"]]
    assert len(drawn) > len(layers) * 4
    for c in drawn:
        r, t = c["rect"], c["text"]
        assert t["w"] > 0, c
        assert r["x"] - SLACK <= t["x"] and t["x"] + t["w"] <= r["x"] + r["w"] + SLACK, c
        assert r["y"] - SLACK <= t["y"] and t["y"] + t["h"] <= r["y"] + r["h"] + SLACK, c
    # row names stay left of the first column
    first = min(xs)
    assert all(n["box"]["x"] + n["box"]["w"] <= first + SLACK for n in m["rowNames"])
    # the page scrolls inside the map's frame at most, never as a whole
    assert geo["scrollWidth"] <= geo["innerWidth"]
    return m


def _fse(m: dict, layer: int) -> dict:
    return next(c for c in m["cells"] if c["row"] == "fse" and c["layer"] == layer)


def test_four_layers_fused_and_unfused_differ_on_screen(monkeypatch, capsys, tmp_path, synth_ckpt):
    report, page = _page(monkeypatch, capsys, tmp_path, synth_ckpt("quark-hybrid"), "2")
    m = _check_layout(report, measure(page))
    fused = next(x for x in report.moe_layers if x.fse.enabled)
    unfused = next(x for x in report.moe_layers if not x.fse.enabled and x.shared is not None)
    a, b = _fse(m, fused.layer), _fse(m, unfused.layer)
    assert a["kind"] == "fused" and b["kind"].startswith("unfused")
    assert unfused.fse.reason in b["title"]  # the reason is the hover text
    # wide columns at 4 layers: the whole scheme label is written out
    routed = next(c for c in m["cells"] if c["row"] == "routed" and c["layer"] == fused.layer)
    assert routed["label"] == fused.routed.scheme
    png = screenshot(page)
    colours = []
    for cell in (a, b):
        r = cell["rect"]
        x, y = int(r["x"]) + 4, int(r["y"]) + 4  # inside the rect, clear of the label
        assert y < WINDOW[1]
        got = pixel(png, x, y)
        want = tuple(int(cell["fill"][i : i + 2], 16) for i in (1, 3, 5))
        assert max(abs(g - w) for g, w in zip(got, want, strict=True)) <= 6, (
            cell["layer"],
            got,
            want,
        )
        colours.append(got)
    assert colours[0] != colours[1]
    assert a["fill"] == FSE_FILL["fused"]


def test_a_clicked_column_shows_that_layers_numbers(monkeypatch, capsys, tmp_path, synth_ckpt):
    report, page = _page(monkeypatch, capsys, tmp_path, synth_ckpt("quark-hybrid"), "2")
    assert not any(p["shown"] for p in measure(page)["panels"])  # nothing clicked yet
    layer = next(m for m in report.moe_layers if m.shared_intermediate is not None
                 and not m.shared_intermediate.aligned)  # fmt: skip
    panels = measure(page, fragment=f"#layer-{layer.layer}")["panels"]
    shown = [p for p in panels if p["shown"]]
    assert [p["id"] for p in shown] == [f"layer-{layer.layer}"]
    g = layer.shared_intermediate
    text = " ".join(shown[0]["text"].split())
    assert f"shared_intermediate.padded_per_rank {g.padded_per_rank}" in text
    assert f"shared_intermediate.pad_to {g.pad_to}" in text
    assert f"fse.code {layer.fse.code}" in text


def test_full_size_r1_draws_59_columns_that_fit(monkeypatch, capsys, tmp_path, synth_ckpt):
    r1 = synth_ckpt("deepseek-v3-fp8", sparse=True)
    report, page = _page(monkeypatch, capsys, tmp_path, r1, "8")
    assert len(report.moe_layers) == 59  # 58 MoE layers (3..60) + the MTP layer 61
    m = _check_layout(report, measure(page))
    # narrow columns still carry the per-rank numbers (3 digits) and the FSE state
    pad = [c for c in m["cells"] if c["row"] == "pad"]
    assert [c["label"] for c in pad] == [str(x.intermediate.per_rank) for x in report.moe_layers]
    assert {c["kind"] for c in m["cells"] if c["row"] == "fse"} == {"fused"}
    # the whole map is on screen at 1500 px: no column is cut off
    assert m["box"]["x"] + m["box"]["w"] <= WINDOW[0]
