"""The HTML report of a diff: one self-contained file that opens offline.

Tables (summary, changes by kind, per-output errors), an op-histogram delta chart and error
histograms (SVG written here), and for every change a picture of the graph around it, before
and after side by side.  The pictures are laid out in the browser by dagre (the maintained
``@dagrejs/dagre`` from the npm registry, vendored in ``_vendor/`` by ``scripts/vendor_js.sh``
and inlined into the file); only the neighbourhood of each change is drawn, when its card is
opened, so a report on a 2,000-node model stays light.  The change list can be searched by node
name; pictures zoom with the wheel and pan by dragging.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from .changes import Change, ModelDiff, neighbourhood, nodes_by_key
from .layers import LayerErrors
from .numeric import ErrorHistogram, OutputErrors

__all__ = ["render_html", "OPEN_BY_DEFAULT", "document", "esc", "human_bytes", "STYLE"]

#: Change cards open (and drawn) when the report loads; the others are drawn when opened.
OPEN_BY_DEFAULT = 6


def _vendor(name: str) -> str:
    return resources.files(__package__).joinpath("_vendor", name).read_text(encoding="utf-8")


def esc(text: object) -> str:
    """``text`` escaped for HTML text and attribute values."""
    return html.escape(str(text), quote=True)


_e = esc


def human_bytes(n: int | None) -> str:
    """A byte count for people (``12.3 KB``); ``-`` for None."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _delta(a: int | None, b: int | None) -> str:
    if a is None or b is None:
        return ""
    d = b - a
    pct = f" ({d / a * 100:+.1f}%)" if a else ""
    return f"{d:+d}{pct}"


def _summary_table(diff: ModelDiff) -> str:
    a, b = diff.a, diff.b
    rows = [("nodes", a.nodes, b.nodes, str(a.nodes), str(b.nodes)),
            ("parameters", a.parameters, b.parameters, f"{a.parameters:,}", f"{b.parameters:,}"),
            ("file size", a.file_bytes, b.file_bytes, human_bytes(a.file_bytes), human_bytes(b.file_bytes)),
            ("distinct ops", len(a.op_histogram), len(b.op_histogram), str(len(a.op_histogram)),
             str(len(b.op_histogram)))]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(ta)}</td><td>{_e(tb)}</td><td>{_e(_delta(va, vb))}</td></tr>"
                   for k, va, vb, ta, tb in rows)
    return (f"<table class='summary'><tr><th></th><th>A: {_e(a.path)}</th><th>B: {_e(b.path)}</th>"
            f"<th>change</th></tr>{body}</table>")


def _op_chart(diff: ModelDiff, limit: int = 30) -> str:
    """Diverging horizontal bars: count in B minus count in A per op."""
    rows = diff.op_deltas()[:limit]
    if not rows:
        return "<p>No op count changed.</p>"
    biggest = max(abs(b - a) for _, a, b in rows)
    row_h, label_w, half = 20, 220, 260
    width, height = label_w + 2 * half + 110, row_h * len(rows) + 10
    parts = [f"<svg class='chart' id='op-chart' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' role='img' aria-label='op histogram delta'>",
             f"<line x1='{label_w + half}' y1='0' x2='{label_w + half}' y2='{height}' class='axis'/>"]
    for i, (op, a, b) in enumerate(rows):
        y = 5 + i * row_h
        d = b - a
        w = max(1.0, abs(d) / biggest * (half - 10))
        x = label_w + half if d > 0 else label_w + half - w
        cls = "more" if d > 0 else "fewer"
        parts.append(f"<text x='{label_w - 6}' y='{y + 14}' text-anchor='end'>{_e(op)}</text>")
        parts.append(f"<rect class='{cls}' x='{x:.1f}' y='{y + 2}' width='{w:.1f}' height='{row_h - 6}'>"
                     f"<title>{_e(op)}: {a} -> {b}</title></rect>")
        parts.append(f"<text x='{label_w + 2 * half + 8}' y='{y + 14}' class='num'>{d:+d} ({a}&#8594;{b})</text>")
    parts.append("</svg>")
    more = len(diff.op_deltas()) - len(rows)
    note = f"<p class='note'>{more} more ops changed count (see the JSON).</p>" if more > 0 else ""
    return "".join(parts) + note


def _histogram_svg(h: ErrorHistogram, index: int) -> str:
    bins = [("0", h.zero)] + [(f"1e{lo}", c) for lo, c in zip(h.edges[:-1], h.counts)]
    top = max((c for _, c in bins), default=0) or 1
    bar_w, height, base = 28, 175, 120
    width = bar_w * len(bins) + 20
    parts = [f"<svg class='hist' id='hist-{index}' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
             f"role='img' aria-label='error histogram of {_e(h.output)}'>"]
    for i, (label, count) in enumerate(bins):
        x = 10 + i * bar_w
        hgt = 0 if count == 0 else max(2.0, count / top * (base - 10))
        cls = "zero" if i == 0 else "err"
        parts.append(f"<rect class='{cls}' x='{x}' y='{base - hgt:.1f}' width='{bar_w - 4}' height='{hgt:.1f}'>"
                     f"<title>|a-b| {'= 0' if i == 0 else 'in [' + label + ', 1e' + str(h.edges[i]) + ')'}: "
                     f"{count} elements</title></rect>")
        parts.append(f"<text x='{x + bar_w / 2 - 2}' y='{base + 12}' transform='rotate(60 {x + bar_w / 2 - 2} "
                     f"{base + 12})' class='tick'>{label}</text>")
    parts.append(f"<text x='{width / 2}' y='{height - 4}' text-anchor='middle' class='tick'>|a-b| (per decade)</text>")
    parts.append("</svg>")
    return "".join(parts)


def _errors_section(errors: OutputErrors | None) -> str:
    if errors is None:
        return ("<p class='note'>No inputs given: run <code>graphwright diff A B --seed N</code> (or "
                "<code>--input NAME=FILE.npy</code>) for per-output errors.</p>")
    report = errors.report
    head = ("<tr><th>output</th><th>shape</th><th>dtype</th><th>max |a-b|</th><th>max rel</th>"
            "<th>exactly equal</th><th>mismatched</th><th>ok</th></tr>")
    rows = []
    for o in report.outputs:
        shape = "x".join(map(str, o.shape_a)) if o.shape_a is not None else "-"
        dtype = o.dtype_a if o.dtype_a == o.dtype_b else f"{o.dtype_a} / {o.dtype_b}"
        def num(x: float | None, spec: str = ".3g") -> str:
            return "-" if x is None else format(x, spec)
        exact = "-" if o.exact is None else f"{o.exact * 100:.1f}%"
        rows.append(f"<tr class='{'ok' if o.ok else 'bad'}'><td>{_e(o.name)}</td><td>{_e(shape)}</td><td>{_e(dtype)}</td>"
                    f"<td>{num(o.max_abs)}</td><td>{num(o.max_rel)}</td><td>{exact}</td>"
                    f"<td>{'-' if o.mismatched is None else o.mismatched}</td><td>{'yes' if o.ok else _e(o.reason or 'no')}</td></tr>")
    inputs = ", ".join(f"{i['name']} {i['dtype']}[{'x'.join(map(str, i['shape']))}]" for i in report.inputs)
    hists = "".join(f"<figure><figcaption>|a-b| of {_e(h.output)} (mean {h.mean_abs:.3g})</figcaption>"
                    f"{_histogram_svg(h, i)}</figure>" if h.mean_abs is not None else ""
                    for i, h in enumerate(errors.histograms))
    notes = "".join(f"<li>{_e(n)}</li>" for n in report.notes)
    return (f"<p>A on {_e(report.backend_a)}, B on {_e(report.backend_b)}; seed {report.seed}; inputs {_e(inputs)}</p>"
            f"<table class='errors'>{head}{''.join(rows)}</table><div class='hists'>{hists}</div>"
            + (f"<ul class='notes'>{notes}</ul>" if notes else ""))


def _sqnr(x: float) -> str:
    return "exact" if x == float("inf") else f"{x:.1f}"


def _layers_chart(layers: LayerErrors) -> str:
    """One horizontal bar per layer: its SQNR in dB (longer is better; exact layers drawn full)."""
    rows = layers.layers
    finite = [x.sqnr_db for x in rows if abs(x.sqnr_db) != float("inf")]
    top = max([*finite, 1.0])
    row_h, label_w, bar_w = 18, 300, 420
    width, height = label_w + bar_w + 90, row_h * len(rows) + 10
    parts = [f"<svg class='chart' id='layer-chart' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
             "role='img' aria-label='per-layer SQNR'>"]
    for i, x in enumerate(rows):
        y = 5 + i * row_h
        value = top if x.sqnr_db == float("inf") else max(x.sqnr_db, 0.0)
        w = max(1.0, value / top * bar_w)
        cls = "zero" if x.sqnr_db == float("inf") else ("err" if x.sqnr_db < 20 else "more")
        label = x.tensor if len(x.tensor) <= 44 else x.tensor[:42] + "\u2026"
        parts.append(f"<text x='{label_w - 6}' y='{y + 13}' text-anchor='end'>{_e(label)}</text>")
        parts.append(f"<rect class='{cls}' x='{label_w}' y='{y + 2}' width='{w:.1f}' height='{row_h - 5}' "
                     f"data-tensor='{_e(x.tensor)}'><title>{_e(x.tensor)} ({_e(x.op_b)}): SQNR {_sqnr(x.sqnr_db)} dB"
                     f"</title></rect>")
        parts.append(f"<text x='{label_w + bar_w + 8}' y='{y + 13}' class='num'>{_sqnr(x.sqnr_db)} dB</text>")
    parts.append("</svg>")
    return "".join(parts)


def _layers_section(layers: LayerErrors | None) -> str:
    if layers is None or not layers.layers:
        why = "".join(f"<li>{_e(n)}</li>" for n in (layers.notes if layers is not None else []))
        return ("<p class='note'>No per-layer error: it needs two TFLite models that name tensors alike (a float "
                "model and its quantized version) and inputs (<code>--seed N</code> or <code>--input</code>).</p>"
                + (f"<ul class='notes'>{why}</ul>" if why else ""))
    head = ("<tr><th>#</th><th>tensor</th><th>op (B)</th><th>shape</th><th>B dtype</th><th>SQNR dB</th>"
            "<th>max |a-b|</th><th>max rel</th><th>mean |a-b|</th><th>max error (steps)</th></tr>")
    rows = "".join(
        f"<tr class='layer{' bad' if x.sqnr_db < 20 else ''}'><td class='num'>{x.index}</td><td class='tensor'>{_e(x.tensor)}</td>"
        f"<td>{_e(x.op_b)}</td><td>{_e('x'.join(map(str, x.shape)))}</td><td>{_e(x.dtype_b)}</td>"
        f"<td class='num'>{_sqnr(x.sqnr_db)}</td><td class='num'>{x.max_abs:.4g}</td>"
        f"<td class='num'>{x.max_rel:.4g}</td><td class='num'>{x.mean_abs:.4g}</td>"
        f"<td class='num'>{'' if x.max_steps is None else format(x.max_steps, '.2f')}</td></tr>"
        for x in layers.layers)
    notes = "".join(f"<li>{_e(n)}</li>" for n in [*layers.notes, *(f"not compared (shapes differ): {n}"
                                                                   for n in layers.skipped)])
    return (f"<p>A on {_e(layers.backend_a)}, B on {_e(layers.backend_b)}: {len(layers.layers)} tensors both models "
            "name alike, in A's execution order (SQNR = 10 log10(sum a&#178; / sum (a-b)&#178;); rows under "
            "20 dB highlighted).</p>" + _layers_chart(layers)
            + f"<table class='layers'>{head}{rows}</table>" + (f"<ul class='notes'>{notes}</ul>" if notes else ""))


def _card(i: int, change: Change) -> str:
    where = " / ".join(x for x in (change.step, change.rule) if x)
    badge = "exact" if change.exact else ("coarse" if change.coarse else "matched by structure")
    names = " ".join([*change.before, *change.after]).lower()
    return (f"<details class='change {change.kind}' id='change-{i}' data-index='{i}' data-names='{_e(names)}'"
            f"{' open' if i < OPEN_BY_DEFAULT else ''}>"
            f"<summary><span class='kind'>{_e(change.kind)}</span> {_e(change.title())}"
            f"<span class='where'>{_e(where)}</span><span class='badge'>{badge}</span></summary>"
            f"<div class='sides'><div class='side'><h4>before (A)</h4><div class='pic' data-side='a'></div>"
            f"</div><div class='side'><h4>after (B)</h4><div class='pic' data-side='b'></div></div></div>"
            "</details>")


def _pictures(change: Change, nodes_a: dict[str, Any], nodes_b: dict[str, Any]) -> dict[str, Any]:
    before = neighbourhood(nodes_a, change.before)
    if change.after:
        return {"a": before, "b": neighbourhood(nodes_b, change.after)}
    # nothing in B stands for the change: draw B around where it was (its neighbours that B still has)
    around = [name for name, _op, changed in before["nodes"] if not changed and name in nodes_b]
    after = neighbourhood(nodes_b, around, mark=False) if around else {"nodes": [], "edges": [], "more": 0}
    after["gone"] = change.kind
    return {"a": before, "b": after}


def render_html(diff: ModelDiff, nodes_a: dict[str, Any], nodes_b: dict[str, Any],
                errors: OutputErrors | None = None, *, title: str = "graphwright diff",
                layers: LayerErrors | None = None) -> str:
    """The report as one HTML string (``nodes_a``/``nodes_b``: name -> node of each main graph; a
    change inside a body is drawn in that body)."""
    maps_a = {"": nodes_a, **{path: nodes_by_key(g) for path, g in diff.bodies_a.items()}}
    maps_b = {"": nodes_b, **{path: nodes_by_key(diff.bodies_b[path_b]) for path, path_b in diff.paired.items()}}
    pictures = [_pictures(c, maps_a[c.graph], maps_b[c.graph]) for c in diff.changes]  # a body's change: its body
    data = json.dumps({"changes": pictures, "open": OPEN_BY_DEFAULT}, separators=(",", ":"))
    data = data.replace("</", "<\\/")  # no "</script>" inside the script element
    counts = diff.counts()
    kinds = "".join(f"<tr><td>{_e(k)}</td><td>{n}</td></tr>" for k, n in counts.items()) or \
        "<tr><td colspan='2'>no changes</td></tr>"
    matched = ("exact: from the provenance sidecar " + _e(diff.provenance) if diff.matched_by == "provenance"
               else "matched by node name and graph structure (no provenance sidecar): not exact")
    notes = "".join(f"<li>{_e(n)}</li>" for n in diff.notes)
    cards = "".join(_card(i, c) for i, c in enumerate(diff.changes))
    return document(title, _BODY.format(
        summary=_summary_table(diff), kinds=kinds, matched=matched,
        notes=f"<ul class='notes'>{notes}</ul>" if notes else "", chart=_op_chart(diff),
        errors=_errors_section(errors), layers=_layers_section(layers), cards=cards, count=len(diff.changes),
        dagre=_vendor("dagre.min.js").replace("</script", "<\\/script"), data=data, app=_APP,
    ))


def document(title: str, body: str) -> str:
    """One self-contained HTML page (graphwright's report style inlined) around ``body``: the
    skeleton of every report graphwright writes (diff, batch).  ``title`` is plain text."""
    return _PAGE.format(title=_e(title), css=STYLE, body=body)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{css}</style></head>
<body>
<h1>{title}</h1>
{body}
</body></html>
"""

_BODY = """<section id="summary"><h2>Summary</h2>{summary}
<p class="matched">Changes {matched}.</p>{notes}
<table class="kinds"><tr><th>change</th><th>count</th></tr>{kinds}</table></section>
<section id="ops"><h2>Op histogram: B minus A</h2>{chart}</section>
<section id="errors"><h2>Per-output error</h2>{errors}</section>
<section id="layers"><h2>Per-layer error</h2>{layers}</section>
<section id="changes"><h2>Changes ({count})</h2>
<div class="tools"><input id="search" type="search" placeholder="search by node name" autocomplete="off">
<span id="found"></span> <button id="open-all" type="button">draw all shown</button>
<span class="help">wheel: zoom, drag: pan, double-click: fit</span></div>
<div id="cards">{cards}</div></section>
<script>{dagre}</script>
<script type="application/json" id="gw-data">{data}</script>
<script>{app}</script>
"""

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1d2330;background:#fbfbfd}
h1{font-size:1.4em} h2{font-size:1.15em;border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} th,td{border:1px solid #d5d8e0;padding:.25em .6em;text-align:left}
th{background:#eef0f5} tr.bad td{background:#fde8e8} .note,.help{color:#667;font-size:.9em}
svg.chart text,svg.hist text{font-size:11px;fill:#333} .axis{stroke:#999}
rect.more{fill:#d9822b} rect.fewer{fill:#2b7bd9} rect.err{fill:#c0504d} rect.zero{fill:#4f9d4f}
.hists{display:flex;flex-wrap:wrap;gap:1em} figure{margin:0} figcaption{font-size:.9em;color:#445}
details.change{border:1px solid #d5d8e0;border-radius:6px;margin:.4em 0;background:#fff}
details.change>summary{cursor:pointer;padding:.4em .6em}
.kind{display:inline-block;min-width:5.5em;font-weight:600;text-transform:uppercase;font-size:.8em;color:#fff;
 background:#667;border-radius:3px;padding:0 .4em;margin-right:.4em;text-align:center}
.fused .kind{background:#b5541b}.folded .kind{background:#7a4bb5}.removed .kind{background:#b53a3a}
.added .kind{background:#2f8a3b}.renamed .kind{background:#3a6fb5}.quantized .kind,.retyped .kind{background:#8a7a1b}
.where{color:#667;margin-left:.8em;font-size:.85em}.badge{float:right;font-size:.8em;color:#556}
.sides{display:flex;gap:.6em;padding:.4em}.side{flex:1 1 0;min-width:0}.side h4{margin:.2em 0;font-size:.9em;color:#445}
.pic{border:1px solid #e2e4ea;height:360px;overflow:hidden;background:#fcfcfe;position:relative}
.pic svg{width:100%;height:100%;cursor:grab;user-select:none}
.pic .empty{position:absolute;top:45%;width:100%;text-align:center;color:#889}
g.node rect{fill:#f4f5f8;stroke:#9aa0ad;rx:4} g.node.changed rect{fill:#ffe3c4;stroke:#d9822b;stroke-width:2}
g.node.hit rect{stroke:#d00;stroke-width:3} g.node text{font-size:11px;fill:#222} g.node text.op{font-weight:600}
table.layers td.tensor{max-width:36em;overflow-wrap:anywhere;font-size:.85em}
td.num{text-align:right;font-variant-numeric:tabular-nums} .status-ok{color:#2f8a3b;font-weight:600}
.status-bad{color:#b53a3a;font-weight:600} .totals span{margin-right:1.2em}
path.edge{fill:none;stroke:#8a90a0;stroke-width:1.2} .tools{margin:.5em 0} #search{width:22em;padding:.3em}
"""

_APP = r"""
(function(){
"use strict";
var DATA = JSON.parse(document.getElementById("gw-data").textContent);
var NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent){var e=document.createElementNS(NS,tag);for(var k in attrs){e.setAttribute(k,attrs[k]);}
  if(parent){parent.appendChild(e);}return e;}
function short(name){var parts=name.split("/");var s=parts[parts.length-1];if(s.length>26){s=s.slice(0,24)+"\u2026";}return s;}
function draw(pic, side, query){
  if(pic.getAttribute("data-drawn")){return;}
  pic.setAttribute("data-drawn","1");
  if(!side.nodes.length){var d=document.createElement("div");d.className="empty";
    d.textContent="("+(side.gone||"removed")+": nothing left here)";pic.appendChild(d);return;}
  var g=new dagre.graphlib.Graph();
  g.setGraph({rankdir:"TB",nodesep:18,ranksep:28,marginx:10,marginy:10});
  g.setDefaultEdgeLabel(function(){return {};});
  side.nodes.forEach(function(n,i){var w=Math.max(n[1].length,short(n[0]).length)*6.6+18;
    g.setNode(String(i),{width:Math.min(w,200),height:34});});
  side.edges.forEach(function(e){g.setEdge(String(e[0]),String(e[1]));});
  dagre.layout(g);
  var info=g.graph(); var gw=Math.max(info.width||1,1), gh=Math.max(info.height||1,1);
  // never drawn larger than life: a small graph sits in the middle of the frame at scale 1
  var r=pic.getBoundingClientRect(); var W=Math.max(gw,r.width||0), H=Math.max(gh,r.height||0);
  var X=-(W-gw)/2, Y=-(H-gh)/2;
  var svg=el("svg",{viewBox:X+" "+Y+" "+W+" "+H,"data-nodes":side.nodes.length},null);
  var defs=el("defs",{},svg); var m=el("marker",{id:"arrow-"+Math.random().toString(36).slice(2),viewBox:"0 0 10 10",
    refX:"9",refY:"5",markerWidth:"7",markerHeight:"7",orient:"auto"},defs);
  el("path",{d:"M0,0 L10,5 L0,10 z",fill:"#8a90a0"},m);
  var root=el("g",{},svg);
  g.edges().forEach(function(e){var pts=g.edge(e).points||[];if(!pts.length){return;}
    var d="M"+pts.map(function(p){return p.x.toFixed(1)+","+p.y.toFixed(1);}).join(" L");
    el("path",{d:d,"class":"edge","marker-end":"url(#"+m.id+")"},root);});
  side.nodes.forEach(function(n,i){var box=g.node(String(i));
    var cls="node"+(n[2]?" changed":"")+(query&&n[0].toLowerCase().indexOf(query)>=0?" hit":"");
    var grp=el("g",{"class":cls,transform:"translate("+(box.x-box.width/2).toFixed(1)+","+(box.y-box.height/2).toFixed(1)+")",
      "data-name":n[0]},root);
    el("rect",{width:box.width,height:box.height},grp);
    var t1=el("text",{x:6,y:14,"class":"op"},grp); t1.textContent=n[1];
    var t2=el("text",{x:6,y:28},grp); t2.textContent=short(n[0]);
    var tip=el("title",{},grp); tip.textContent=n[0]+" ("+n[1]+")"+(n[2]?" \u2014 changed":"");});
  if(side.more){var t=el("text",{x:X+4,y:Y+H-4,"font-size":"11",fill:"#889"},svg);t.textContent="+"+side.more+" more neighbours";}
  pic.appendChild(svg); zoomable(svg,X,Y,W,H);
}
function zoomable(svg,X,Y,W,H){
  var vb={x:X,y:Y,w:W,h:H};
  function set(){svg.setAttribute("viewBox",vb.x+" "+vb.y+" "+vb.w+" "+vb.h);}
  svg.addEventListener("wheel",function(ev){ev.preventDefault();var r=svg.getBoundingClientRect();
    var fx=(ev.clientX-r.left)/r.width, fy=(ev.clientY-r.top)/r.height, k=ev.deltaY<0?0.85:1/0.85;
    var nw=vb.w*k, nh=vb.h*k; vb.x+= (vb.w-nw)*fx; vb.y+=(vb.h-nh)*fy; vb.w=nw; vb.h=nh; set();},{passive:false});
  var drag=null;
  svg.addEventListener("mousedown",function(ev){drag={x:ev.clientX,y:ev.clientY,vx:vb.x,vy:vb.y};svg.style.cursor="grabbing";});
  window.addEventListener("mouseup",function(){drag=null;svg.style.cursor="grab";});
  svg.addEventListener("mousemove",function(ev){if(!drag){return;}var r=svg.getBoundingClientRect();
    vb.x=drag.vx-(ev.clientX-drag.x)*vb.w/r.width; vb.y=drag.vy-(ev.clientY-drag.y)*vb.h/r.height; set();});
  svg.addEventListener("dblclick",function(){vb={x:X,y:Y,w:W,h:H};set();});
}
var query="";
function drawCard(card){var i=+card.getAttribute("data-index");var c=DATA.changes[i];
  card.querySelectorAll(".pic").forEach(function(p){draw(p,c[p.getAttribute("data-side")],query);});}
var cards=Array.prototype.slice.call(document.querySelectorAll("details.change"));
cards.forEach(function(card){card.addEventListener("toggle",function(){if(card.open){drawCard(card);}});
  if(card.open){drawCard(card);}});
var search=document.getElementById("search"), found=document.getElementById("found");
search.addEventListener("input",function(){query=search.value.trim().toLowerCase();var n=0;
  cards.forEach(function(card){var hit=!query||card.getAttribute("data-names").indexOf(query)>=0;
    card.style.display=hit?"":"none"; if(hit){n++;}
    card.querySelectorAll("g.node").forEach(function(g){var on=query&&g.getAttribute("data-name").toLowerCase().indexOf(query)>=0;
      g.setAttribute("class",g.getAttribute("class").replace(/ hit/g,"")+(on?" hit":""));});});
  found.textContent=query?n+" of "+cards.length+" changes":"";});
document.getElementById("open-all").addEventListener("click",function(){
  cards.forEach(function(card){if(card.style.display!=="none"){card.open=true;drawCard(card);}});});
document.body.setAttribute("data-drawn-changes",String(document.querySelectorAll(".pic[data-drawn]").length));
document.body.setAttribute("data-ready-ms",String(Math.round(performance.now())));
})();
"""
