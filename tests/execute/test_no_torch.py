"""``ckpt convert`` moves bytes: it never imports torch (importing it alone costs ~2 s of a
process whose target is a ratio to ``cp -r``). Checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(("preset", "tp"), [("quark-hybrid", 1), ("deepseek-v3-fp8", 2)])
def test_convert_never_imports_torch(synth_ckpt, tmp_path, preset, tp):
    src = synth_ckpt(preset)
    dst = tmp_path / "out"
    probe = (
        "import sys\n"
        "from checkpoint_tool.cli.app import main\n"
        f"sys.argv = ['ckpt', 'convert', {str(src)!r}, {str(dst)!r}, '--tp', '{tp}',\n"
        "            '--no-progress', '--no-fsync', '--format', 'json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.stderr.strip().splitlines()[-1] in ("NO-TORCH 0", "NO-TORCH None"), proc.stderr
    assert (dst / "ckpt-manifest.json").is_file()
