"""``--format html`` without a browser: drawn from the JSON alone, self-contained, escaped,
deterministic, one column per MoE layer with the report's decisions."""

from __future__ import annotations

import json
import re
import shutil
import struct
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from checkpoint_tool.cli.app import main
from checkpoint_tool.html.cells import issue_layers, layer_roots
from checkpoint_tool.html.layer_map import PAD, cell_width, char_width, fit
from checkpoint_tool.html.policy_page import render_policy_html
from checkpoint_tool.html.validate_page import render_validate_html
from checkpoint_tool.policy import PolicyReport
from checkpoint_tool.report import Issue
from checkpoint_tool.synth import PRESETS
from checkpoint_tool.validate.report import ValidateReport


def _ckpt(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ckpt", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text, as the browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    return p


#: the target that fuses per layer, so a map shows fused and unfused layers side by side
#: (a stock vLLM target fuses none: every FSE cell would be "not fused: target")
PER_LAYER = ("--target", "vllm-per-layer-fse")


@pytest.fixture(scope="module")
def hybrid_pages(synth_ckpt):
    """quark-hybrid at --tp 2: (exit code json, json text, exit code html, html text)."""
    src = str(synth_ckpt("quark-hybrid"))
    mp = pytest.MonkeyPatch()
    out = []
    try:
        for fmt in ("json", "html"):
            mp.setattr(sys, "argv", ["ckpt", "inspect", src, "--tp", "2", *PER_LAYER, "--format", fmt])
            code = 0
            import io

            buf = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
            mp.setattr(sys, "stdout", buf)
            try:
                main()
            except SystemExit as exc:
                code = int(exc.code or 0)
            buf.flush()
            out += [code, buf.buffer.getvalue().decode("utf-8")]
    finally:
        mp.undo()
    return out


def test_the_page_is_drawn_from_the_json_alone(hybrid_pages):
    code_json, text_json, code_html, page = hybrid_pages
    assert code_html == code_json == 1  # the engine refuses the per-layer FSE mix
    report = PolicyReport.model_validate_json(text_json)
    assert page == render_policy_html(report)
    # the same report, once more through JSON: the same bytes
    again = PolicyReport.model_validate_json(report.model_dump_json())
    assert render_policy_html(again) == page


def test_one_column_per_moe_layer_with_the_reports_decisions(hybrid_pages):
    _, text_json, _, page = hybrid_pages
    report = PolicyReport.model_validate_json(text_json)
    tags = _parse(page).tags
    cols = [a["data-layer"] for t, a in tags if t == "g" and a.get("class") == "col"]
    assert cols == [str(m.layer) for m in report.moe_layers]
    (svg,) = [a for t, a in tags if t == "svg"]
    assert svg["data-layers"] == str(len(report.moe_layers))
    fse = [a["data-kind"] for t, a in tags if t == "rect" and a.get("data-row") == "fse"]
    want = ["fused" if m.fse.enabled else f"unfused-{m.fse.source}" for m in report.moe_layers]
    assert fse == want and "fused" in fse and "unfused-vllm" in fse
    # the shared MLP of layer 2 needs padding at tp 2 (128 / 2 = 64, FP8 blocks of 128)
    pads = {a["data-kind"] for t, a in tags if t == "rect" and a.get("data-row") == "shared_pad"}
    assert "padded" in pads
    # click-through: every column links to a panel with that layer's numbers
    links = [a["href"] for t, a in tags if t == "a" and a.get("href", "").startswith("#layer-")]
    panels = [a["id"] for t, a in tags if t == "section" and a.get("class") == "panel"]
    assert [x[1:] for x in links] == panels == [f"layer-{m.layer}" for m in report.moe_layers]
    # the reason is the hover text (<title>) of the FSE cell, verbatim
    titles = re.findall(r'<g><title>([^<]*)</title><rect class="cell" data-row="fse"', page)
    assert len(titles) == len(report.moe_layers)
    for m, title in zip(report.moe_layers, titles, strict=True):
        assert (m.fse.reason or "") in title and f"MoE layer {m.layer}:" in title


def test_self_contained_no_script_no_fetch(hybrid_pages):
    page = hybrid_pages[3]
    tags = _parse(page).tags
    names = {t for t, _ in tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed"}
    for _, attrs in tags:
        assert not any(k.startswith("on") for k in attrs)
        assert "src" not in attrs
        assert not (attrs.get("href") or "#").split("#")[0], attrs  # in-page anchors only
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched
    assert "url(" not in page and "@import" not in page


def _hostile(report: PolicyReport) -> PolicyReport:
    """The report with user data that would be markup if it were not escaped."""
    evil = '<script>alert("t")</script><img src=x onerror=alert(1)>'
    issue = Issue(
        severity="error",
        rule="scale_shape",
        file='a"b.safetensors',
        tensor=f"model.layers.1.mlp.experts.0.{evil}.weight",
        message=f"bad {evil}",
    )
    return report.model_copy(
        update={"source": f'"><svg onload=alert(2)>{evil}', "issues": [*report.issues, issue]}
    )


def test_user_data_is_escaped_everywhere(hybrid_pages):
    report = _hostile(PolicyReport.model_validate_json(hybrid_pages[1]))
    page = render_policy_html(report)
    parsed = _parse(page)
    names = [t for t, _ in parsed.tags]
    assert "script" not in names and "img" not in names
    assert names.count("svg") == 1
    assert not any(k.startswith("on") for _, a in parsed.tags for k in a)
    text = "".join(parsed.text)
    assert '<script>alert("t")</script>' in text  # shown as text, not run
    # the finding lands on layer 1's findings cell (by its tensor name) as an error
    cells = [
        a["data-kind"] for t, a in parsed.tags if t == "rect" and a.get("data-row") == "findings"
    ]
    assert cells[0] == "error"


def test_findings_are_placed_on_the_layers_they_name(hybrid_pages):
    report = PolicyReport.model_validate_json(hybrid_pages[1])
    roots = layer_roots(report)
    assert roots[0] == ("model.layers.1.", 1)

    def on(tensor=None, message="x"):
        return issue_layers(
            Issue(severity="warning", rule="r", tensor=tensor, message=message), roots
        )

    assert on("model.layers.2.mlp.experts.3.up_proj.weight_scale") == [2]
    assert on("model.layers.21.mlp.experts.3.up_proj.weight") == []  # not layer 2
    assert on(message="MoE layer(s) [2, 4]: shared intermediate ...") == [2, 4]
    assert on(message="MoE layer 3 changed: fse.enabled: true -> false") == [3]
    assert on(message="MoE layer(s) [2, 99]: ...") == [2]  # only layers of the map
    assert on("model.embed_tokens.weight", "model-wide") == []


@pytest.mark.parametrize("n_layers", [1, 4, 13, 59, 61, 160])
def test_labels_fit_their_estimated_width(n_layers):
    cw = cell_width(n_layers)
    assert 22 <= cw <= 200
    for labels in [
        ("fp8_block[128,128]", "A"),
        ("no: quark_different_configs", "no", "n"),
        ("1536->2048", "+512", "+"),
        (str(60 + n_layers),),
    ]:
        got = fit(labels, cw)
        assert len(got) * char_width(cw) <= cw - 2 * PAD
        assert got in labels or got.endswith("…") or got == ""
    assert fit(("fp8_block[128,128]", "A"), 200) == "fp8_block[128,128]"
    assert fit(("fp8_block[128,128]", "A"), 22) == "A"
    assert fit(("no: quark_different_configs", "no", "n"), 120).endswith("…")


@pytest.mark.parametrize("cmd", ["tensor", "plan", "synth"])
def test_commands_without_a_page_refuse_html_before_working(monkeypatch, capsys, tmp_path, synth_ckpt, cmd):
    """Commands that draw no page do not offer html: typer refuses it before any work
    (synth must not write a whole checkpoint and then exit 2)."""
    src = synth_ckpt("quark-hybrid")
    argv = {
        "tensor": ["tensor", str(src), "model.layers.1.mlp.experts.0.down_proj.weight"],
        "plan": ["plan", str(src)],
        "synth": ["synth", "quark-hybrid", str(tmp_path / "never")],
    }[cmd]
    code, out, err = _ckpt(monkeypatch, capsys, *argv, "--format", "html")
    assert code == 2 and out == ""
    assert "--format" in err and "html" in err
    assert not (tmp_path / "never").exists()


def _poke_nan_scale(dst: Path, name: str) -> None:
    """Write E8M0 255 (NaN) into the first byte of scale ``name``."""
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    path = dst / index["weight_map"][name]
    raw = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    begin = 8 + n + json.loads(raw[8 : 8 + n])[name]["data_offsets"][0]
    raw[begin] = 255
    path.write_bytes(bytes(raw))


def test_validate_page_maps_the_gates_findings(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = tmp_path / "bad"
    shutil.copytree(synth_ckpt("quark-hybrid"), src)
    _poke_nan_scale(src, "model.layers.3.mlp.experts.1.down_proj.weight_scale")
    code_json, text, _ = _ckpt(monkeypatch, capsys, "validate", str(src), "--format", "json")
    code_html, page, _ = _ckpt(monkeypatch, capsys, "validate", str(src), "--format", "html")
    _, policy_text, _ = _ckpt(monkeypatch, capsys, "inspect", str(src), "--format", "json")
    assert code_json == code_html == 1
    report = ValidateReport.model_validate_json(text)
    policy = PolicyReport.model_validate_json(policy_text)
    # the page is the validate report plus the policy `ckpt inspect` reports (tp 1)
    assert page == render_validate_html(report, policy)
    tags = _parse(page).tags
    gate = [(a["data-kind"]) for t, a in tags if t == "rect" and a.get("data-row") == "validate"]
    layers = [m.layer for m in policy.moe_layers]
    assert gate[layers.index(3)] == "error"
    assert [k for i, k in enumerate(gate) if layers[i] != 3] == ["ok"] * (len(layers) - 1)
    assert "scale_values" in page


def test_validate_html_file_and_expected_policy_options(monkeypatch, capsys, synth_ckpt, tmp_path):
    src = str(synth_ckpt("quark-hybrid"))
    _, policy_text, _ = _ckpt(monkeypatch, capsys, "inspect", src, "--tp", "2", "--format", "json")
    expected = tmp_path / "policy.json"
    expected.write_text(policy_text)
    side = tmp_path / "validate.html"
    argv = ["validate", src, "--expect-policy", str(expected)]
    code, xml, _ = _ckpt(monkeypatch, capsys, *argv, "--format", "junit", "--html", str(side))
    code_html, page, _ = _ckpt(monkeypatch, capsys, *argv, "--format", "html")
    assert code == code_html == 0 and xml.startswith("<?xml")
    assert side.read_text(encoding="utf-8") == page
    # the map shows the policy at the expected options (tp 2: layer 2's shared MLP pads)
    assert "tp 2, fse auto" in page and 'data-row="shared_pad" data-kind="padded"' in page
    assert not list(tmp_path.glob(".*partial"))
    code, _, err = _ckpt(monkeypatch, capsys, "validate", src, "--html", str(tmp_path / "no" / "x"))
    assert code == 2 and "cannot write the HTML report" in err


def test_validate_page_without_moe_layers_says_why(monkeypatch, capsys, tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"w": np.ones((2, 2), dtype=np.float32)}, str(tmp_path / "one.safetensors"))
    code, page, _ = _ckpt(
        monkeypatch, capsys, "validate", str(tmp_path / "one.safetensors"), "--format", "html"
    )
    assert code in (0, 1)  # the gate's own verdict; the page is drawn either way
    assert page.startswith("<!DOCTYPE html>") and "no layer map" in page
    assert "<svg" not in page


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_draws_its_layers(monkeypatch, capsys, synth_ckpt, preset):
    """DeepSeek-V3/V4, Quark, ModelOpt, Qwen3.5 names and layouts: one column per MoE layer,
    the FSE and padding cells as the report decides, at a tp that misaligns some of them."""
    src = str(synth_ckpt(preset))
    _, text, _ = _ckpt(monkeypatch, capsys, "inspect", src, "--tp", "4", "--format", "json")
    report = PolicyReport.model_validate_json(text)
    tags = _parse(render_policy_html(report)).tags
    rects = [a for t, a in tags if t == "rect"]

    def kinds(row: str) -> list[str]:
        return [a["data-kind"] for a in rects if a.get("data-row") == row]

    assert len(kinds("layer")) == len(report.moe_layers) > 0
    assert kinds("fse") == [
        "n/a" if m.fse.code == "no_shared_experts" else "fused" if m.fse.enabled
        else f"unfused-{m.fse.source}" for m in report.moe_layers
    ]  # fmt: skip
    assert kinds("pad") == [
        "aligned" if m.intermediate.aligned and m.intermediate.divisible else "padded"
        for m in report.moe_layers
    ]
