"""The HTML report of a quantization: one self-contained file (no script, no network).

Sections: the summary (mode, data, sizes, latencies, times), warnings, per-output errors, the
per-layer SQNR as a horizontal bar chart drawn here as inline SVG (one bar per layer in graph
order, its length the SQNR in dB, red below ``LOW_SQNR_DB``), the sensitivity ranking when it
ran, and the transform's counts and notes.  O(outputs + layers).
"""

from __future__ import annotations

import html
import math

from .report import QuantReport

__all__ = ["LOW_SQNR_DB", "render_html", "sqnr_chart"]

#: Layers below this SQNR are drawn red (about 5 bits of signal left).
LOW_SQNR_DB = 30.0
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}.warn{background:#fff3cd;border:2px solid #d39e00;padding:.6em}
svg text{font:11px system-ui,sans-serif}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _db(x: float | None) -> str:
    if x is None:
        return "-"
    return "exact" if math.isinf(x) and x > 0 else f"{x:.1f}"


def _num(x: float | None, fmt: str = "{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MB"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def sqnr_chart(labels: list[str], values: list[float], *, title: str = "per-layer SQNR (dB)") -> str:
    """Horizontal SVG bars, one per label; infinite values (exact) drawn full length."""
    if not values:
        return "<p>No layer could be compared.</p>"
    finite = [v for v in values if math.isfinite(v)]
    top = max([*finite, LOW_SQNR_DB, 1.0])
    row_h, label_w, bar_w = 18, 300, 420
    height = row_h * len(values) + 30
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{label_w + bar_w + 80}' height='{height}' "
             f"role='img' aria-label='{_e(title)}'>"]
    x_low = label_w + bar_w * LOW_SQNR_DB / top
    parts.append(f"<line x1='{x_low:.1f}' y1='0' x2='{x_low:.1f}' y2='{height - 20}' stroke='#999' "
                 "stroke-dasharray='3,3'/>")
    for i, (label, value) in enumerate(zip(labels, values)):
        y = i * row_h
        shown = top if not math.isfinite(value) and value > 0 else max(value, 0.0)
        width = bar_w * shown / top
        color = "#c0392b" if value < LOW_SQNR_DB else "#2e86c1"
        short = label if len(label) <= 45 else "…" + label[-44:]
        parts.append(f"<text x='{label_w - 6}' y='{y + 13}' text-anchor='end'><title>{_e(label)}</title>"
                     f"{_e(short)}</text>")
        parts.append(f"<rect x='{label_w}' y='{y + 3}' width='{width:.1f}' height='{row_h - 6}' fill='{color}'/>")
        parts.append(f"<text x='{label_w + width + 4:.1f}' y='{y + 13}'>{_e(_db(value))}</text>")
    parts.append(f"<text x='{x_low:.1f}' y='{height - 6}' text-anchor='middle'>{LOW_SQNR_DB:.0f} dB</text>")
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: QuantReport, *, title: str = "graphwright quantize") -> str:
    """The whole report as one HTML document."""
    r = report
    summary = [
        ["format / mode", f"{r.format} / {r.mode}", ""],
        ["calibration", f"{r.method}, {r.calibration_samples} sample(s)" if r.method else "none", r.data_source],
        ["report on", f"{r.eval_samples} {r.eval_split} sample(s)", ""],
        ["model size", _bytes(r.size_before), _bytes(r.size_after)],
        [f"latency ({r.runtime or '-'})", _num(r.latency_before_ms, "{:.3f} ms"), _num(r.latency_after_ms, "{:.3f} ms")],
        ["time", f"quantize {r.quantize_seconds:.2f} s",
         f"calibration {r.calibration_seconds:.2f} s, sensitivity {r.sensitivity_seconds:.2f} s (included)"],
    ]
    outputs = [[o.name, "x".join(map(str, o.shape)), f"{o.max_abs:.4g}", f"{o.mean_abs:.4g}", f"{o.rel_error:.3%}",
                _db(o.sqnr_db), "-" if o.top1_agreement is None else f"{o.top1_agreement:.1%}"] for o in r.outputs]
    sections = [f"<h1>{_e(title)}</h1>"]
    sections += [f"<p class='warn'><b>warning:</b> {_e(w)}</p>" for w in r.warnings]
    sections.append("<h2>Summary</h2>" + _table(["", "before / value", "after / detail"], summary))
    sections.append("<h2>Outputs vs the float model</h2>" + _table(
        ["output", "shape", "max |err|", "mean |err|", "relative", "SQNR dB", "top-1 agree"], outputs))
    sections.append("<h2>Per-layer SQNR</h2>" + sqnr_chart([x.node for x in r.layers], [x.sqnr_db for x in r.layers]))
    if r.sensitivity:
        rows = [[s.node, s.op, _db(s.sqnr_db), _db(s.gain_db), "float" if s.kept_float else "quantized"]
                for s in r.sensitivity]
        sections.append("<h2>Sensitivity (output SQNR with every layer quantized but this one; largest gain "
                        "first)</h2>" + _table(["layer", "op", "SQNR dB", "gain dB", "result"], rows))
    if r.excluded_ops or r.excluded_nodes:
        sections.append(f"<p>Excluded ops: {_e(', '.join(r.excluded_ops) or '-')}; nodes: "
                        f"{_e(', '.join(r.excluded_nodes) or '-')}</p>")
    stats = [[str(k), str(v)] for k, v in r.stats.items()]
    sections.append("<h2>Transform</h2>" + _table(["count", "value"], stats)
                    + "".join(f"<p>{_e(n)}</p>" for n in r.notes))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(sections)}</body></html>\n")
