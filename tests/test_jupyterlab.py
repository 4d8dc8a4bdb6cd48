"""Notebook 01 as a user meets it: a real JupyterLab server, the notebook opened in headless
Chromium, Run All, and the figures drawn on the page."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from browser import Chromium, JupyterLab, find_chromium, jupyterlab_installed, wait_for
from conftest import REPO

NOTEBOOK = "01-quickstart.ipynb"
CHROMIUM = find_chromium()

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (Debian: apt-get install chromium)"),
    pytest.mark.skipif(
        not jupyterlab_installed(), reason="JupyterLab is not installed (pip install -e '.[notebooks]')"
    ),
]

# The notebook's panel in the running app, found by its path (the JSON string is inlined).
PANEL = """[...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === %s)"""

READY = """(async () => {
  const app = window.jupyterapp;
  if (!app) return null;
  await app.restored;
  const w = PANEL;
  if (!w) return null;
  await w.context.ready;
  await w.sessionContext.ready;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  return kernel ? kernel.status : null;
})()"""

RUN_ALL = """(() => {
  const app = window.jupyterapp;
  const w = PANEL;
  app.shell.activateById(w.id);
  app.commands.execute('notebook:run-all-cells');  // awaited below by watching the cells
  return app.commands.hasCommand('notebook:run-all-cells');
})()"""

# The notebook as the app holds it (nbformat JSON), the kernel's status, and whether any cell
# is still queued or running.
STATE = """(() => {
  const w = PANEL;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const busy = w.content.widgets.filter(c => c.model.type === 'code' && c.model.executionState === 'running').length;
  return {kernel: kernel ? kernel.status : null, busy: busy, nb: w.context.model.toJSON()};
})()"""

# Every image in the notebook's output areas: scrolled into view, decoded, and measured.
IMAGES = """(async () => {
  const w = PANEL;
  const out = [];
  for (const img of w.node.querySelectorAll('.jp-OutputArea-output img')) {
    img.scrollIntoView({block: 'center'});
    try { await img.decode(); } catch (e) {}
    const r = img.getBoundingClientRect();
    out.push({naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight, width: r.width, height: r.height});
  }
  return out;
})()"""

STDERR = """[...PANEL.node.querySelectorAll(
  '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')].map(e => e.textContent)"""

FIRST_IMAGE_BOX = """(async () => {
  const img = PANEL.node.querySelector('.jp-OutputArea-output img');
  img.scrollIntoView({block: 'center'});
  await img.decode();
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));  // painted
  const r = img.getBoundingClientRect();
  return {x: r.x, y: r.y, width: r.width, height: r.height, dpr: window.devicePixelRatio};
})()"""


def js(template: str) -> str:
    return template.replace("PANEL", PANEL % json.dumps(NOTEBOOK))


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", root)  # the server and the kernel write here, not into the checkout
    (tmp_path / "jupyter").mkdir()
    server = JupyterLab(root, tmp_path / "jupyter")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def browser(tmp_path):
    (tmp_path / "chromium").mkdir()
    b = Chromium(CHROMIUM, tmp_path / "chromium" / "profile")
    try:
        b.open_page()
        yield b
    finally:
        b.close()


def _distinct_colours(png, box=None) -> tuple[int, float]:
    """Distinct colours in a PNG (or a box of it), and the share of the commonest one."""
    from PIL import Image

    with Image.open(png) as im:
        im = im.convert("RGB")
        if box is not None:
            x0, y0, x1, y1 = box
            im = im.crop((max(x0, 0), max(y0, 0), min(x1, im.width), min(y1, im.height)))
        colours = im.getcolors(maxcolors=im.width * im.height)
        return len(colours), max(n for n, _ in colours) / (im.width * im.height)


def test_notebook_01_runs_and_draws_in_jupyterlab(lab, browser, tmp_path):
    t0 = time.monotonic()
    browser.navigate(lab.page(NOTEBOOK))
    wait_for(
        lambda: browser.evaluate(js(READY)) == "idle",
        60,
        f"JupyterLab to open {NOTEBOOK} with an idle kernel",
        alive=browser.alive,
    )
    assert browser.evaluate(js(RUN_ALL)), "JupyterLab has no notebook:run-all-cells command"

    def done():
        s = browser.evaluate(js(STATE))
        code = [c for c in s["nb"]["cells"] if c["cell_type"] == "code"]
        ran = all(c["execution_count"] is not None for c in code)
        failed = any(o["output_type"] == "error" for c in code for o in c["outputs"])  # Run All stops there
        return s if s["kernel"] == "idle" and not s["busy"] and (ran or failed) else None

    state = wait_for(done, 120, "every code cell to run and the kernel to be idle", every=0.25, alive=browser.alive)
    code = [c for c in state["nb"]["cells"] if c["cell_type"] == "code"]
    outputs = [o for c in code for o in c["outputs"]]
    errors = [f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error"]
    assert not errors, f"error outputs in {NOTEBOOK}: {errors}"
    counts = [c["execution_count"] for c in code]
    assert counts == sorted(counts) and len(set(counts)) == len(counts), f"cells did not run once, in order: {counts}"
    stderr = browser.evaluate(js(STDERR))
    assert not [t for t in stderr if "Traceback" in t], f"tracebacks on the page: {stderr}"

    # every image output the kernel sent is an <img> the browser decoded and laid out
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 2, f"{NOTEBOOK} should draw the period plot and the heatmap; it drew {len(pngs)} figures"
    images = browser.evaluate(js(IMAGES))
    assert len(images) == len(pngs), f"{len(pngs)} figures in the outputs, {len(images)} <img> on the page"
    for im in images:
        assert im["naturalWidth"] > 0 and im["naturalHeight"] > 0, f"a figure did not decode: {im}"
        assert im["width"] > 100 and im["height"] > 100, f"a figure is not laid out at a visible size: {im}"

    # the screenshot shows the page, and the first figure (the period plot) painted on it
    box = browser.evaluate(js(FIRST_IMAGE_BOX))
    shot = browser.screenshot(tmp_path / "01-quickstart.png")
    n, top = _distinct_colours(shot)
    assert n > 50 and top < 0.95, f"{shot} looks blank: {n} colours, the commonest covers {top:.0%}"
    assert box["y"] >= 0 and box["y"] + box["height"] <= browser.height, f"the figure is not in view: {box}"
    d = box["dpr"]
    crop = (
        int(box["x"] * d),
        int(box["y"] * d),
        int((box["x"] + box["width"]) * d),
        int((box["y"] + box["height"]) * d),
    )
    n, top = _distinct_colours(shot, crop)
    assert n > 20 and top < 0.95, f"the figure in {shot} {crop} looks blank: {n} colours, the commonest {top:.0%}"
    print(f"JupyterLab: {NOTEBOOK} opened, run and drawn in {time.monotonic() - t0:.1f} s; screenshot {shot}")
