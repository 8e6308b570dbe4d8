"""The HTML report in a real headless browser (Debian's chromium): it renders without a console
message, the pictures are laid out (dagre) around each change, and it is self-contained.

CI needs ``apt-get install -y chromium``; without the browser these tests are skipped, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from graphwright import formats
from graphwright.cli.main import main
from graphwright.diff import write_provenance
from graphwright.diff.html import OPEN_BY_DEFAULT
from graphwright.simplify import simplify
from graphwright.transforms import run_pipeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install -y chromium")


def _browser(page: Path, tmp: Path, *, screenshot: Path | None = None) -> tuple[str, str]:
    """(DOM after the scripts ran, the browser's log on stderr)."""
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=5000", "--window-size=1400,2200", f"--user-data-dir={tmp / 'profile'}"]
    env = {**os.environ, "HOME": str(tmp)}
    if screenshot is not None:
        shot = subprocess.run([*flags, f"--screenshot={screenshot}", page.as_uri()], capture_output=True,
                              text=True, timeout=120, env=env)
        assert shot.returncode == 0, shot.stderr[-2000:]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout, dom.stderr


def _console(log: str) -> list[str]:
    """Every message the page wrote to its console (errors, uncaught exceptions, logs)."""
    return [line for line in log.splitlines() if ":CONSOLE" in line]


def _nodes(svg: str) -> dict[str, tuple[float, float, str]]:
    """data-name -> (x, y, class) of the drawn nodes of one picture."""
    found = {}
    for m in re.finditer(r'<g class="([^"]*)" transform="translate\(([-\d.]+),([-\d.]+)\)" data-name="([^"]*)"', svg):
        found[m.group(4)] = (float(m.group(2)), float(m.group(3)), m.group(1))
    return found


def _pictures(dom: str, index: int) -> tuple[str, str]:
    """The before and after <svg> of change ``index``."""
    card = dom.split(f'id="change-{index}"', 1)[1].split("</details>", 1)[0]
    sides = re.findall(r'data-side="([ab])"[^>]*>(.*?)</div>', card, flags=re.S)
    pics = dict(sides)
    return pics["a"], pics["b"]


@needs_browser
def test_readme_example_report_shows_the_batch_norm_folds_and_conv_fusions(tmp_path: Path) -> None:
    before = EXAMPLES / "small_cnn.pb"
    after = tmp_path / "small_cnn_deploy.pb"
    m = formats.load(before)
    run_pipeline(m, "optimize_for_deployment fuse_remapper", outputs=["Identity"])
    formats.save(m, after)
    write_provenance(m, after)
    report = tmp_path / "report.html"
    assert main(["diff", str(before), str(after), "--html", str(report), "--quiet"]) == 0
    text = report.read_text()
    # self-contained: nothing fetched from anywhere
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import|url\(http", text)
    assert "dagre" in text and "Chris Pettitt" not in text.split("<script>")[0]
    shot = tmp_path / "report.png"
    dom, log = _browser(report, tmp_path, screenshot=shot)
    assert _console(log) == []
    assert shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    changes = len(re.findall(r'<details class="change ', dom))
    # the model's 3 convolutions, 1 depthwise convolution (each with its batch norm and relu) and
    # its dense layer are fused; the Identity nodes and the rest are removed
    assert dom.count('<span class="kind">fused</span>') == 5
    assert dom.count('<span class="kind">removed</span>') >= 20
    assert f'data-drawn-changes="{2 * min(OPEN_BY_DEFAULT, changes)}"' in dom
    # the first change: the first convolution with its batch norm and relu, fused
    svg_a, svg_b = _pictures(dom, 0)
    nodes_a, nodes_b = _nodes(svg_a), _nodes(svg_b)
    conv = next(n for n in nodes_a if n.endswith("/convolution") and "conv" in n and "changed" in nodes_a[n][2])
    relu = conv.split("/conv")[0] + "/relu" + conv.split("/conv")[1].split("/")[0] + "/Relu"
    assert "changed" in nodes_a[relu][2]
    assert nodes_a[conv][1] < nodes_a[relu][1]  # laid out top to bottom: the conv above its relu
    fused = nodes_b[relu]
    assert "changed" in fused[2] and re.search(rf'data-name="{re.escape(relu)}"[^>]*>.*?_FusedConv2D', svg_b, re.S)
    weights = next(n for n in nodes_b if n.endswith("folded_weights"))
    assert nodes_b[weights][1] < fused[1]  # the folded weights feed the fused conv from above
    # a laid-out picture: several ranks and no two nodes on the same spot
    assert len({y for _, y, _ in nodes_a.values()}) >= 4
    assert len({(x, y) for x, y, _ in nodes_a.values()}) == len(nodes_a)
    assert 'class="edge"' in svg_a and 'class="edge"' in svg_b


@needs_browser
def test_onnx_report_with_error_histograms_renders(tmp_path: Path) -> None:
    before = EXAMPLES / "small_cnn.onnx"
    after = tmp_path / "small_cnn_sim.onnx"
    m, _ = simplify(before)
    formats.save(m, after)
    write_provenance(m, after)
    report = tmp_path / "report.html"
    assert main(["diff", str(before), str(after), "--html", str(report), "--seed", "3", "--quiet"]) == 0
    shot = tmp_path / "report_onnx.png"
    dom, log = _browser(report, tmp_path, screenshot=shot)
    assert _console(log) == []
    assert 'id="hist-0"' in dom and 'id="op-chart"' in dom
    bars = re.findall(r'<rect class="(?:err|zero)"[^>]*height="([\d.]+)"', dom)
    assert len(bars) == 15 and any(float(h) > 0 for h in bars)
    # the batch norms folded into their convolutions, drawn
    assert dom.count('<span class="kind">fused</span>') == 5
    svg_a, svg_b = _pictures(dom, 0)
    ops_a = re.findall(r'<text x="6" y="14" class="op">([^<]+)</text>', svg_a)
    assert "BatchNormalization" in ops_a and "Conv" in ops_a
    assert "BatchNormalization" not in re.findall(r'<text x="6" y="14" class="op">([^<]+)</text>', svg_b)


@needs_browser
def test_search_box_filters_changes_by_node_name(tmp_path: Path) -> None:
    """The search runs in the page: a script typed into the box leaves only matching cards."""
    before = EXAMPLES / "small_cnn.onnx"
    after = tmp_path / "sim.onnx"
    m, _ = simplify(before)
    formats.save(m, after)
    report = tmp_path / "report.html"
    assert main(["diff", str(before), str(after), "--html", str(report), "--no-provenance", "--quiet"]) == 0
    names = re.findall(r"data-names='([^']+)'", report.read_text())
    assert len(names) == 5  # the five batch norms, matched by structure
    name = "/down/down.1/"  # one of them
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace(
        "</body>", "<script>var s=document.getElementById('search');s.value=" + repr(name) +
        ";s.dispatchEvent(new Event('input'));</script></body>"))
    dom, log = _browser(probe, tmp_path)
    assert _console(log) == []
    shown = re.findall(r'<details class="change [^"]*" id="change-(\d+)"[^>]*data-names="([^"]*)"(?! style="display: none;")', dom)
    hidden = re.findall(r'style="display: none;"', dom)
    assert re.search(r'<span id="found">1 of 5 changes</span>', dom)
    assert len(hidden) == 4 and shown
