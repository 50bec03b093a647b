"""Reports of a bundle, from its manifest alone: a text summary and ``report.html`` with an SVG
picture of the graph, coloured by device, one outlined lane per region."""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

COLORS = {"vulkan-spirv": "#f08c3a", "cuda": "#76b900", "llvm-cpu": "#5b8def"}


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _crossing(m: dict[str, Any]) -> list[tuple[str, str]]:
    """(tensor, region) for every tensor a region reads from another region."""
    graph_inputs = {t["name"] for t in m["inputs"]}
    return [(v, r["name"]) for r in m["regions"] for v in r["inputs"] if v not in graph_inputs]


def _measured(region: dict[str, Any]) -> str:
    return f"{region['measured_us']:.1f}" if "measured_us" in region else "-"


def coverage_line(cov: dict[str, Any] | None) -> str:
    if not cov:
        return "coverage: no accelerator requested"
    pct = 100 * cov["supported"] / max(cov["total"], 1)
    return f"coverage: {cov['supported']}/{cov['total']} nodes supported on {cov['target']}, {pct:.1f}%"


def text(m: dict[str, Any]) -> str:
    regions = m["regions"]
    bt = m["boundary_tensors"]
    part = m.get("partition", {})
    total_nodes = sum(len(r["nodes"]) for r in regions)
    lines = [f"model {m['model']['name']!r}  sha256 {m['model']['sha256'][:12]}  opset {m['model']['opset']}",
             f"{total_nodes} nodes in {len(regions)} region(s); schedule: {' -> '.join(m['schedule'])}",
             coverage_line(part.get("coverage"))]
    for row in (part.get("coverage") or {}).get("unsupported", []):
        lines.append(f"  unsupported {row['op']} x{row['count']}: {row['reason']}")
    lines.append("")
    lines.append(f"{'region':8s} {'target':22s} {'nodes':>5s} {'compute':>7s} {'MFLOPs':>9s} {'est us':>9s} "
                 f"{'real us':>9s} {'in bytes':>10s} {'out bytes':>10s}")
    for r in regions:
        ins = sum(bt[v]["bytes"] or 0 for v in r["inputs"])
        outs = sum(bt[v]["bytes"] or 0 for v in r["outputs"])
        lines.append(f"{r['name']:8s} {r['target'] + ':' + r['arch']:22s} {len(r['nodes']):5d} {r['compute_nodes']:7d} "
                     f"{r.get('flops', 0) / 1e6:9.2f} {r.get('estimated_us', 0):9.1f} "
                     f"{_measured(r):>9s} {_bytes(ins):>10s} {_bytes(outs):>10s}")
        if r["fallback"]:
            lines.append(f"         fell back to the host: {r['fallback'][:300]}")
    crossing = _crossing(m)
    lines.append(f"\nboundary: {len(crossing)} tensor(s) between regions, "
                 f"{_bytes(sum(bt[v]['bytes'] or 0 for v, _ in crossing))} per run")
    for v, r in crossing[:40]:
        t = bt[v]
        lines.append(f"  {v!r:40.40s} -> {r}: {t['dtype']}{t['shape']} {_bytes(t['bytes'])}")
    gate = part.get("gate")
    if gate:
        lines.append(f"\ngate: {'partition accepted' if gate['accepted'] else 'partition rejected'}: {gate['detail']}")
    ver = m.get("verification")
    if ver:
        lines.append("\nverification on the device vs onnxruntime:")
        for c in ver["checked"]:
            diff = "-" if c["max_abs_diff"] is None else f"{c['max_abs_diff']:.3g}"
            lines.append(f"  {c['region']}: {'ok' if c['ok'] else 'FAILED'} (max abs diff {diff})")
        for c in ver["moved_to_host"]:
            lines.append(f"  {c['region']}: moved to the host: {c['error']}")
    reasons = Counter(m["host_reasons"].values())
    if reasons:
        lines.append("\nwhy nodes are on the host:")
        for reason, n in reasons.most_common(12):
            lines.append(f"  {n:4d} x {reason}")
    for tip in part.get("suggestions", []):
        lines.append(f"suggestion: {tip}")
    return "\n".join(lines)


def svg(m: dict[str, Any], width: int = 1500) -> str:
    """One outlined block per region, in schedule order, flowing left to right and wrapping at
    ``width``; inside a block, nodes go left to right by depth and long regions wrap into bands,
    so a 400-node model stays readable on one screen. Red lines: tensors passed between regions."""
    nodes = m.get("graph", [])
    by_name = {n["name"]: n for n in nodes}
    region_of = {n: r["name"] for r in m["regions"] for n in r["nodes"]}
    target = {r["name"]: r["target"] for r in m["regions"]}
    producer = {v: n["name"] for n in nodes for v in n["outputs"]}
    col_w, row_h, node_w, node_h, pad, head = 64, 22, 58, 16, 10, 30
    per_band = max(1, (width - 2 * pad - 20) // col_w)
    local: dict[str, tuple[int, int]] = {}          # node -> (column, row) inside its region
    size: dict[str, tuple[int, int, int]] = {}      # region -> (columns, rows, bands)
    for r in m["regions"]:
        depth: dict[str, int] = {}
        used: dict[int, int] = {}
        for name in r["nodes"]:  # topological order
            n = by_name[name]
            depth[name] = 1 + max((depth[producer[v]] for v in n["inputs"]
                                   if producer.get(v) in depth), default=-1)
            local[name] = (depth[name], used.get(depth[name], 0))
            used[depth[name]] = used.get(depth[name], 0) + 1
        cols = max(depth.values(), default=0) + 1
        # at least 3 columns wide, so the block's title fits
        size[r["name"]] = (max(3, min(cols, per_band)), max(used.values(), default=1), -(-cols // per_band))
    origin: dict[str, tuple[int, int]] = {}
    x, y, line_h = 4, 4, 0
    for name in m["schedule"]:
        cols, rows, bands = size[name]
        w, h = cols * col_w + 2 * pad, head + bands * rows * row_h + pad
        if x + w > width and x > 4:
            x, y, line_h = 4, y + line_h + 12, 0
        origin[name] = (x, y)
        x, line_h = x + w + 12, max(line_h, h)
    height = y + line_h + 8

    def pos(name: str) -> tuple[int, int]:
        r = region_of[name]
        (col, row), (ox, oy), (_, rows, _) = local[name], origin[r], size[r]
        band, col = divmod(col, per_band)
        return ox + pad + col * col_w, oy + head + (band * rows + row) * row_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="9">']
    for r in m["regions"]:
        cols, rows, bands = size[r["name"]]
        ox, oy = origin[r["name"]]
        color = COLORS.get(r["target"], "#999")
        out.append(f'<rect x="{ox}" y="{oy}" width="{cols * col_w + 2 * pad}" height="{head + bands * rows * row_h + pad}" '
                   f'fill="{color}" fill-opacity="0.10" stroke="{color}" stroke-width="2" rx="6"/>')
        out.append(f'<text x="{ox + 6}" y="{oy + 14}" font-size="11" font-weight="bold">{html.escape(r["name"])} '
                   f'<tspan font-weight="normal">{html.escape(r["target"])}, {len(r["nodes"])} nodes</tspan></text>')
    for n in nodes:
        x2, y2 = pos(n["name"])
        for v in n["inputs"]:
            if v in producer:
                x1, y1 = pos(producer[v])
                cross = region_of[producer[v]] != region_of[n["name"]]
                style = 'stroke="#c0392b" stroke-width="1.8"' if cross else 'stroke="#777" stroke-width="0.6"'
                out.append(f'<line x1="{x1 + node_w}" y1="{y1 + node_h / 2}" x2="{x2}" y2="{y2 + node_h / 2}" {style}/>')
    for n in nodes:
        x, y = pos(n["name"])
        out.append(f'<g><title>{html.escape(n["name"])} ({html.escape(n["op"])})</title>'
                   f'<rect x="{x}" y="{y}" width="{node_w}" height="{node_h}" rx="3" '
                   f'fill="{COLORS.get(target[region_of[n["name"]]], "#999")}" stroke="#222" stroke-width="0.4"/>'
                   f'<text x="{x + 3}" y="{y + 11}">{html.escape(n["op"][:11])}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def html_page(m: dict[str, Any]) -> str:
    part = m.get("partition", {})
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(r['name'])}</td><td style='color:{COLORS.get(r['target'], '#000')}'>{esc(r['target'])}:{esc(r['arch'])}</td>"
        f"<td>{len(r['nodes'])}</td><td>{r['compute_nodes']}</td><td>{r.get('flops', 0) / 1e6:.2f}</td>"
        f"<td>{r.get('estimated_us', 0):.1f}</td><td>{_measured(r)}</td><td>{_bytes(sum(m['boundary_tensors'][v]['bytes'] or 0 for v in r['inputs']))}</td>"
        f"<td>{esc(r['fallback'] or '')}</td></tr>" for r in m["regions"])
    unsupported = "".join(f"<tr><td>{esc(u['op'])}</td><td>{u['count']}</td><td>{esc(u['reason'])}</td></tr>"
                          for u in (part.get("coverage") or {}).get("unsupported", []))
    gate = part.get("gate")
    gate_html = (f"<p><b>Gate:</b> {'partition accepted' if gate['accepted'] else 'partition rejected'} &mdash; "
                 f"{esc(gate['detail'])}</p>") if gate else "<p><b>Gate:</b> not applied (one region, or --no-gate)</p>"
    tips = "".join(f"<li>{esc(t)}</li>" for t in part.get("suggestions", []))
    legend = " ".join(f"<span style='background:{c};padding:2px 8px;border-radius:3px'>{esc(t)}</span>" for t, c in COLORS.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>aot report: {esc(m['model']['name'])}</title>
<style>body{{font-family:sans-serif;margin:20px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}
.pic{{overflow:auto;border:1px solid #ccc}}</style></head><body>
<h1>aot report: {esc(m['model']['name'])}</h1>
<p>{esc(coverage_line(part.get('coverage')))}; {sum(len(r['nodes']) for r in m['regions'])} nodes in {len(m['regions'])} region(s);
schedule {esc(' → '.join(m['schedule']))}; policy {esc(str(part.get('policy')))}, select {esc(str(part.get('select')))}.</p>
{gate_html}
<h2>Regions</h2><table><tr><th>region</th><th>target</th><th>nodes</th><th>compute</th><th>MFLOPs</th><th>est. µs</th><th>real µs</th><th>input bytes</th><th>fallback</th></tr>{rows}</table>
<h2>Unsupported operators</h2>{f'<table><tr><th>op</th><th>count</th><th>reason</th></tr>{unsupported}</table>' if unsupported else '<p>none: every node is supported by the accelerator target</p>'}
{f'<h2>Suggestions</h2><ul>{tips}</ul>' if tips else ''}
<h2>Graph</h2><p>{legend} &nbsp; red lines: tensors passed between regions; hover a node for its name.</p>
<div class="pic">{svg(m)}</div>
</body></html>
"""
