"""Headless Chromium for the HTML tests: measure a page's geometry, take a screenshot, read pixels.

``measure(page)`` loads a copy of the page with a probe script appended (the report itself has
no script) and returns what Chromium laid out: per map, the columns drawn and every cell's
rect and label box. ``screenshot(page)`` returns the PNG; ``pixel(png, x, y)`` decodes it
(stdlib zlib; RGB/RGBA 8-bit as Chromium writes them) up to that pixel.

Example::

    geo = measure(page_path)
    geo["maps"][0]["columns"]        # 4
    measure(page_path, fragment="#layer-2")["panels"][1]["shown"]   # True: a column clicked
    rgb = pixel(screenshot(page_path), 300, 370)   # (46, 157, 79)
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from html import unescape
from pathlib import Path

#: no network, no first-run work, a fresh profile per run
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--disable-dev-shm-usage",
)
WINDOW = (1500, 1000)
TIMEOUT_S = 90

PROBE = """
<script>
window.addEventListener("load", function () {  // after the fragment's :target is set
  const box = (e) => { const b = e.getBoundingClientRect();
    return {x: b.left, y: b.top, w: b.width, h: b.height}; };
  const out = {maps: [], scrollWidth: document.documentElement.scrollWidth,
               innerWidth: window.innerWidth};
  for (const svg of document.querySelectorAll("svg.map")) {
    const cells = [];
    for (const g of svg.querySelectorAll("g.col > g")) {
      const rect = g.querySelector("rect"), text = g.querySelector("text");
      cells.push({layer: Number(g.parentNode.dataset.layer), row: rect.dataset.row,
                  kind: rect.dataset.kind, fill: rect.getAttribute("fill"),
                  rect: box(rect), label: text ? text.textContent : "",
                  text: text ? box(text) : null,
                  title: g.querySelector("title").textContent});
    }
    out.maps.push({layers: Number(svg.dataset.layers), box: box(svg),
                   columns: svg.querySelectorAll("g.col").length, cells: cells,
                   rowNames: [...svg.querySelectorAll("text.row")].map(
                     (t) => ({name: t.textContent, box: box(t)})),
                   font: getComputedStyle(svg.querySelector("text")).fontFamily});
  }
  out.panels = [...document.querySelectorAll("section.panel")].map((p) => ({
    id: p.id, shown: getComputedStyle(p).display !== "none", text: p.innerText}));
  const pre = document.createElement("pre");
  pre.id = "ckpt-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str | None:
    """The Chromium binary (``CKPT_CHROMIUM``, else chromium / chromium-browser on PATH)."""
    explicit = os.environ.get("CKPT_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    binary = chromium()
    assert binary is not None
    with tempfile.TemporaryDirectory(prefix="ckpt-chromium-") as profile:
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
        proc = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc


def measure(page: Path, window: tuple[int, int] = WINDOW, fragment: str = "") -> dict:
    """Chromium's layout of ``page`` (opened at ``#fragment`` if given): see the module
    docstring; ``panels`` says which layer panels are displayed."""
    probe = page.with_name(page.stem + ".probe.html")
    text = page.read_text(encoding="utf-8")
    probe.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    proc = _run([f"--window-size={window[0]},{window[1]}", "--dump-dom", probe.as_uri() + fragment])
    dom = proc.stdout.decode("utf-8")
    start = dom.index('<pre id="ckpt-probe">') + len('<pre id="ckpt-probe">')
    return json.loads(unescape(dom[start : dom.index("</pre>", start)]))


def screenshot(page: Path, window: tuple[int, int] = WINDOW) -> bytes:
    shot = page.with_suffix(".png")
    _run([f"--window-size={window[0]},{window[1]}", f"--screenshot={shot}", page.as_uri()])
    return shot.read_bytes()


def _chunks(png: bytes) -> tuple[int, int, int, bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, data = 8, b""
    width = height = color = 0
    while pos < len(png):
        (size,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + size]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
        elif kind == b"IDAT":
            data += body
        pos += 12 + size
    return width, height, color, zlib.decompress(data)


def pixel(png: bytes, x: int, y: int) -> tuple[int, int, int]:
    """The RGB of pixel (x, y): rows unfiltered up to ``y``, each only up to ``x``."""
    width, height, color, raw = _chunks(png)
    assert 0 <= x < width and 0 <= y < height, (x, y, width, height)
    bpp = 4 if color == 6 else 3
    stride = width * bpp
    need = (x + 1) * bpp
    prev = bytearray(need)
    for row in range(y + 1):
        base = row * (stride + 1)
        kind = raw[base]
        line = bytearray(raw[base + 1 : base + 1 + need])
        for i in range(need):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif kind == 4:
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        prev = line
    return tuple(prev[x * bpp : x * bpp + 3])  # type: ignore[return-value]
