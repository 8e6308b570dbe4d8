"""The HTML summary of a batch (``graphwright batch --html FILE``): one self-contained page.

It is drawn from the JSON summary (:func:`~.result.summary_dict`), so the two say the same: a
row per model (before/after nodes, status and attempts, verification error, time, the error
message; with a quantize job in the batch also its mode, worst output SQNR, top-1 agreement and
the file sizes), rows of models that did not finish ``ok`` highlighted, and the count per status.  The
page skeleton and style are the diff report's (:func:`graphwright.diff.html.document`).
"""

from __future__ import annotations

from typing import Any

from ..diff.html import document, esc

__all__ = ["render_summary_html"]

_COLUMNS = ("model", "status", "nodes before", "nodes after", "max abs error", "checks", "time (s)", "error",
            "output")
#: Columns added after "checks" when a quantize job is in the batch.
_QUANTIZE_COLUMNS = ("quantize", "worst SQNR (dB)", "top-1 agreement", "size before", "size after")


def _cell(value: Any, *, num: bool = False) -> str:
    return f"<td class='num'>{esc(value)}</td>" if num else f"<td>{esc(value)}</td>"


def _quantize_cells(m: dict[str, Any]) -> str:
    """A quantize job's numbers (empty cells for other jobs; 'exact' for an error-free result)."""
    if m.get("quantize_mode") is None:
        return "<td></td>" * len(_QUANTIZE_COLUMNS)
    sqnr = m.get("sqnr_db")
    exact = sqnr is None and m.get("max_abs_error") == 0.0
    sqnr_text = "exact" if exact else "" if sqnr is None else f"{sqnr:.2f}"
    top1 = "" if m.get("top1_agreement") is None else f"{m['top1_agreement']:.1%}"
    return (_cell(m["quantize_mode"]) + _cell(sqnr_text, num=True) + _cell(top1, num=True)
            + _cell(m.get("size_before", ""), num=True) + _cell(m.get("size_after", ""), num=True))


def render_summary_html(summary: dict[str, Any], *, title: str = "graphwright batch") -> str:
    """The page for a :func:`~.result.summary_dict` summary."""
    quantized = any(m.get("quantize_mode") is not None for m in summary["models"])
    rows = []
    for m in summary["models"]:
        ok = m["status"] == "ok"
        tries = f" ({m['attempts']} tries)" if m.get("attempts", 1) > 1 else ""
        error = "" if m.get("max_abs_error") is None else f"{m['max_abs_error']:.3g}"
        before = "" if m.get("nodes_before") is None else m["nodes_before"]
        after = "" if m.get("nodes_after") is None else m["nodes_after"]
        rows.append(
            f"<tr class='model {'ok' if ok else 'bad'}' data-status='{esc(m['status'])}'>"
            + _cell(m["name"])
            + f"<td class='status-{'ok' if ok else 'bad'}'>{esc(m['status'])}{esc(tries)}</td>"
            + _cell(before, num=True) + _cell(after, num=True) + _cell(error, num=True)
            + _cell(m.get("checks", 0), num=True) + (_quantize_cells(m) if quantized else "")
            + _cell(f"{m.get('seconds', 0.0):.2f}", num=True)
            + _cell(m.get("error", "")) + _cell(m.get("output", "")) + "</tr>")
    columns = _COLUMNS[:6] + _QUANTIZE_COLUMNS + _COLUMNS[6:] if quantized else _COLUMNS
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    totals = summary["totals"]
    counts = "".join(f"<span class='total' data-status='{esc(s)}'>{esc(s)}: <b>{n}</b></span>"
                     for s, n in totals.items() if s != "models")
    not_ok = totals["models"] - totals.get("ok", 0)
    verdict = ("<p class='status-ok'>Every model finished ok.</p>" if not_ok == 0 else
               f"<p class='status-bad'>{not_ok} of {totals['models']} model(s) did not finish ok "
               "(highlighted).</p>")
    body = (f"<section id='totals'><h2>Totals</h2><p class='totals'>models: <b>{totals['models']}</b> "
            f"{counts}</p>{verdict}</section>"
            f"<section id='models'><h2>Models</h2><table class='batch'><tr>{head}</tr>{''.join(rows)}</table>"
            "</section>")
    return document(title, body)
