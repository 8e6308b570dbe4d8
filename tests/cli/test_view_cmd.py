"""``graphwright view``: Netron serves the model on a local port (checked over HTTP), the summary is
printed beside it, and the server stops on Ctrl+C.  Needs the ``[view]`` extra (netron)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from graphwright import formats
from graphwright.diff import write_provenance
from graphwright.simplify import simplify

pytest.importorskip("netron", reason="the [view] extra (pip install netron) is not installed")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _start(*argv: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "graphwright.cli.main", "view", *argv, "--no-browser",
                             "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "BROWSER": "false"})
    lines: list[str] = []
    wanted = 2 if "--diff" in argv else 1
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while sum("netron:" in line for line in lines) < wanted and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    return proc, lines


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:  # a loopback URL this test started
        assert response.status == 200
        return response.read()


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=90) == 0  # shutting Netron down took over 30 s once on a machine loaded 9


def _refused(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) != 0


def test_view_serves_the_model_and_stops() -> None:
    model = EXAMPLES / "small_cnn.tflite"
    proc, lines = _start(str(model))
    try:
        text = "".join(lines)
        assert "small_cnn.tflite: tflite," in text and "inputs:" in text and "ops:" in text
        (url,) = re.findall(r"netron: .* at (http://\S+)/", text)
        index = _get(url + "/").decode()
        assert '<meta name="file" content="/data/small_cnn.tflite">' in index
        assert _get(url + "/data/small_cnn.tflite") == model.read_bytes()
    finally:
        _stop(proc)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    assert _refused(host, int(port))


def test_view_diff_serves_both_and_prints_the_changes(tmp_path: Path) -> None:
    before = EXAMPLES / "small_cnn.onnx"
    after = tmp_path / "sim.onnx"
    m, _ = simplify(before)
    formats.save(m, after)
    write_provenance(m, after)
    proc, lines = _start(str(before), "--diff", str(after))
    try:
        text = "".join(lines)
        assert "nodes 20 -> 15; 5 fused (exact)" in text
        urls = re.findall(r"netron: .* at (http://\S+)/", text)
        assert len(urls) == 2 and urls[0] != urls[1]
        assert _get(urls[0] + "/data/small_cnn.onnx") == before.read_bytes()
        assert _get(urls[1] + "/data/sim.onnx") == after.read_bytes()
    finally:
        _stop(proc)
    for url in urls:  # both servers stopped, B's child process included
        host, port = url.removeprefix("http://").rsplit(":", 1)
        assert _refused(host, int(port))


def test_view_without_netron_is_one_line_and_exit_2() -> None:
    code = ("import sys; sys.modules['netron'] = None\n"
            "from graphwright.cli.main import main\n"
            f"sys.exit(main(['view', {str(EXAMPLES / 'small_cnn.onnx')!r}, '--no-browser']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("graphwright: error: graphwright view needs Netron: pip install 'graphwright[view]'")
    assert done.stderr.count("\n") == 1
