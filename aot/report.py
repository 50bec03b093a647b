"""Reports: of a bundle, from its deploy contract and its build record (a text summary and
``report.html`` with an SVG picture of the graph, coloured by device, one outlined lane per
region), and of a plan before anything is compiled (`aot plan`). A bundle built before build
records existed is reported from its contract alone, and the report says so."""

from __future__ import annotations

import html
from collections import Counter

from typing import TYPE_CHECKING

from aot.record import BuildRecord, CoverageRecord, PartitionRecord, RegionRecord
from aot.runtime.manifest import IndexStatus, Manifest

NO_RECORD = ("no build record: this bundle was built before aot kept one (partition, gate, estimates, "
             "verification and tuning are unknown); rebuild it for a full report")

if TYPE_CHECKING:
    from aot.pipeline import Planned

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


def _crossing(m: Manifest) -> list[tuple[str, str]]:
    """(tensor, region) for every tensor a region reads from another region."""
    graph_inputs = {t.name for t in m.inputs}
    return [(v, r.name) for r in m.regions for v in r.inputs if v not in graph_inputs]


def _measured(region: RegionRecord) -> str:
    return f"{region.measured_us:.1f}" if region.measured_us is not None else "-"


def _nbytes(m: Manifest, tensors: tuple[str, ...]) -> int:
    return sum(m.boundary(v).bytes or 0 for v in tensors)


def _origin(m: Manifest, rec: BuildRecord | None) -> str:
    """The front end: the ONNX opset, or the torch and iree-turbine versions that exported it."""
    if m.model.frontend == "torch":
        versions = dict(m.toolchain)
        return (f"PyTorch {m.model.source} (torch {versions.get('torch', '?')}, "
                f"iree-turbine {versions.get('iree-turbine', '?')})")
    return f"opset {rec.opset}" if rec else "ONNX"


def _op_counts(rec: BuildRecord, region: RegionRecord, most: int = 8) -> str:
    ops = {g.name: g.op for g in rec.graph}
    counts = Counter(ops.get(n, "?") for n in region.nodes).most_common()
    text = ", ".join(f"{op} x{n}" for op, n in counts[:most])
    return text + (f", {len(counts) - most} more op types" if len(counts) > most else "")


def coverage_line(cov: CoverageRecord | None) -> str:
    if not cov:
        return "coverage: no accelerator requested"
    pct = 100 * cov.supported / max(cov.total, 1)
    return f"coverage: {cov.supported}/{cov.total} nodes supported on {cov.target}, {pct:.1f}%"


def _name(node: str, most: int = 40) -> str:
    return node if len(node) <= most else node[:most - 3] + "..."


def segment_lines(part: PartitionRecord, most: int = 40) -> list[str]:
    """One line per key-node segment (index, node count, first..last key node) and, under
    ``--order search``, what the search scored there and the greedy vs chosen lane time."""
    if not part.segments:
        return []
    search = part.order_search
    scores = {s.index: s for s in search.segments} if search else {}
    scoring = search.measured_scoring if search else None
    measured = {s.index: s for s in scoring.segments} if scoring else {}
    lines = [f"segments: {len(part.segments)} (cut at key nodes, which every input-to-output path visits)"]
    for seg in part.segments[:most]:
        keys = ("-" if seg.first_key is None or seg.last_key is None else _name(seg.first_key)
                if seg.first_key == seg.last_key else f"{_name(seg.first_key)}..{_name(seg.last_key)}")
        line = f"  segment {seg.index:3d} {seg.nodes:5d} node(s)  {keys}"
        if (sc := scores.get(seg.index)) is not None:
            line += (f"  [{sc.plans_scored} plan(s) scored: greedy {sc.greedy_us:.1f} us, "
                     f"chosen {sc.chosen_us:.1f} us]")
        if (ms := measured.get(seg.index)) is not None:
            line += f"  [measured: greedy {ms.greedy_us:.1f} us, chosen {ms.chosen_us:.1f} us]"
        lines.append(line)
    if len(part.segments) > most:
        lines.append(f"  ... {len(part.segments) - most} more segment(s)")
    if search:
        lines.append(f"order search (budget {search.budget} per segment): greedy plan {search.greedy_us:.1f} us, "
                     f"searched plan {search.searched_us:.1f} us ({search.fused_bounds} segment bound(s) fused "
                     f"back); kept the {search.kept.value} plan")
        if scoring is not None:
            lines.append(f"  scored with measured region times: {scoring.regions_timed} distinct region(s) timed on "
                         f"their devices from {scoring.plans_timed} plan(s), {scoring.rounds} round(s); the scoring took {scoring.scored_measured} "
                         f"region(s) measured, {scoring.scored_estimated} estimated (scaled per device)"
                         f"{', in one lane (the devices share the host cores)' if scoring.one_lane else ''}"
                         f"{f', one transfer {scoring.hop_us:.1f} us as the whole runs measured it' if scoring.hop_us is not None else ''}: "
                         f"{scoring.verdict()}, {'not ' if scoring.changed else ''}the estimates' choice "
                         f"({scoring.seconds:.1f}s)")
        if search.measured_greedy_us is not None and search.measured_searched_us is not None:
            lines.append(f"  measured on the devices: greedy {search.measured_greedy_us:.1f} us, searched "
                         f"{search.measured_searched_us:.1f} us (medians)")
    return lines


def overlap_line(m: Manifest) -> str:
    if not m.overlap:
        return "overlap: none (no two regions on different devices are independent)"
    return "overlap: " + ", ".join(f"{a} || {b}" for a, b in m.overlap) + " (run at the same time, one lane per device)"


def text(m: Manifest, rec: BuildRecord | None) -> str:
    lines = [f"model {m.model.name!r}  sha256 {m.model.sha256[:12]}  {_origin(m, rec)}"]
    if rec is None:
        lines += [f"{len(m.regions)} region(s); schedule: {' -> '.join(m.schedule)}", overlap_line(m), NO_RECORD, ""]
        lines += [f"{r.name:8s} {str(r.target):22s} in {_bytes(_nbytes(m, r.inputs)):>10s} "
                  f"out {_bytes(_nbytes(m, r.outputs)):>10s}" for r in m.regions]
    else:
        lines += _record_lines(m, rec)
        lines += ["", *segment_lines(rec.partition)] if rec.partition.segments else []
        lines += ["", *rec.partition.memory.lines()] if rec.partition.memory else []
    crossing = _crossing(m)
    lines.append(f"\nboundary: {len(crossing)} tensor(s) between regions, "
                 f"{_bytes(_nbytes(m, tuple(v for v, _ in crossing)))} per run")
    for v, r in crossing[:40]:
        t = m.boundary(v)
        shape = None if t.shape is None else list(t.shape)
        lines.append(f"  {v!r:40.40s} -> {r}: {t.dtype}{shape} {_bytes(t.bytes)}")
    if m.memory:
        lines.append("\ndevice memory one run holds (checked against each device when the bundle loads):")
        lines += [f"  {d.driver:12s} {d.text()}" for d in m.memory]
    if rec is not None:
        lines += _decision_lines(m, rec)
    elif m.host_runtime:
        lines.append(f"\nhost runtime: {m.host_runtime.label}")
    if m.index_ops:
        lines += ["", index_text(m)]
    if m.shapes:
        lines += ["", buckets_text(m)]
    if rec is not None and rec.rewrites:
        lines.append("\nops rewritten before planning (what IREE cannot lower as they are, or runs slowly):")
        lines += [f"  {w.op} x{w.count}: {w.reason}" for w in rec.rewrites]
    if rec is not None:
        reasons = Counter(reason for _, reason in rec.host_reasons)
        if reasons:
            lines.append("\nwhy nodes are on the host:")
            lines += [f"  {n:4d} x {reason}" for reason, n in reasons.most_common(12)]
        lines += [f"suggestion: {tip}" for tip in rec.partition.suggestions]
    return "\n".join(lines)


def _record_lines(m: Manifest, rec: BuildRecord) -> list[str]:
    """Coverage and the region table: what the plan put where, estimated and measured."""
    part = rec.partition
    lines = [f"{sum(len(r.nodes) for r in rec.regions)} nodes in {len(m.regions)} region(s); "
             f"schedule: {' -> '.join(m.schedule)}", overlap_line(m), coverage_line(part.coverage)]
    lines += [f"  unsupported {row.op} x{row.count}: {row.reason}"
              for row in (part.coverage.unsupported if part.coverage else ())]
    lines.append("")
    lines.append(f"{'region':8s} {'target':22s} {'nodes':>5s} {'compute':>7s} {'MFLOPs':>9s} {'est us':>9s} "
                 f"{'real us':>9s} {'in bytes':>10s} {'out bytes':>10s}")
    for entry in m.regions:
        r = rec.region(entry.name)
        lines.append(f"{r.name:8s} {str(entry.target):22s} {len(r.nodes):5d} {r.compute_nodes:7d} "
                     f"{r.flops / 1e6:9.2f} {r.estimated_us:9.1f} {_measured(r):>9s} "
                     f"{_bytes(_nbytes(m, entry.inputs)):>10s} {_bytes(_nbytes(m, entry.outputs)):>10s}")
        if r.fallback:
            lines.append(f"         fell back to the host: {r.fallback[:300]}")
        lines.append(f"         ops: {_op_counts(rec, r)}")
    return lines


def _decision_lines(m: Manifest, rec: BuildRecord) -> list[str]:
    """The gate, verification and tuning: what the build decided by estimating or measuring."""
    lines = []
    gate = rec.partition.gate
    if gate:
        lines.append(f"\ngate: {gate.verdict()}: {gate.detail}")
        if (predicted := gate.prediction_line()) is not None:
            lines.append(f"  {predicted}")
    if rec.verification and rec.verification.skipped:
        lines.append(f"\nverification skipped: {rec.verification.skipped}; run `aot check` on the target machine")
    elif rec.verification:
        lines.append(f"\nverification on the device vs {m.model.reference}:")
        for c in rec.verification.checked:
            diff = "-" if c.max_abs_diff is None else f"{c.max_abs_diff:.3g}"
            lines.append(f"  {c.region}: {'ok' if c.ok else 'FAILED'} (max abs diff {diff})")
        lines += [f"  {c.region}: moved to the host: {c.error}" for c in rec.verification.moved_to_host]
    if _tuned(m, rec):
        lines += ["", tuning_text(m, rec)]
    lines += ["", *rec.segment_tuning.lines()] if rec.segment_tuning else []
    return lines


def _tuned(m: Manifest, rec: BuildRecord) -> bool:
    return any(r.tuning for r in rec.regions) or m.host_runtime is not None


def tuning_text(m: Manifest, rec: BuildRecord) -> str:
    """Per region: the winning flag set, its time and the default's; every rejection and why."""
    lines = [f"tuning (warm medians on the region's device; candidates checked against {m.model.reference}):"]
    for r in m.regions:
        t = rec.region(r.name).tuning
        if t is None:
            lines.append(f"  {r.name}: not tuned (flags: {' '.join(r.flags) or 'none'})")
            continue
        speed = f"{t.speedup:.2f}x" if t.speedup else "-"
        lines.append(f"  {r.name}: {t.winner} {_us(t.best_us)} vs default {_us(t.default_us)} ({speed}) on {t.device}")
        lines.append(f"      flags: {' '.join(r.flags) or '(none)'}")
        if t.narrowed is not None:
            wins = dict(t.narrowed.wins)
            left = [f"{name} {wins.get(name, 0)}/{_us(us)}" for name, us in t.narrowed.predicted
                    if name not in t.narrowed.kept]
            lines.append(f"      --tune-top: timed {len(t.narrowed.kept)} of {len(t.narrowed.predicted)}; the others won "
                         f"less often in the learned model's training ({t.narrowed.model[:12]}) or, as often, were "
                         f"predicted slower (wins/predicted): {', '.join(left)}"[:400])
        for c in t.candidates:
            note = (f"the same module as {c.same_as}: not timed again" if c.same_as else c.rejected
                    or (f"pruned after {c.timed_calls} timed calls: far behind the best" if c.pruned(t) else ""))
            lines.append(f"      {c.name:28s} {_us(c.median_us):>12s}  {note}"[:220])
    if m.host_runtime:
        rt = m.host_runtime
        measured = ", ".join(f"{k}: {_us(v)}" for k, v in rec.host_runtime_measured)
        lines.append(f"host runtime: {rt.label}" + (f" ({measured})" if measured else ""))
    return "\n".join(lines)


_INDEX_STATUS = {IndexStatus.PROVED: "proved in range", IndexStatus.CHECKED: "checked at the boundary",
                 IndexStatus.GUARDED: "guarded", IndexStatus.DEFINED: "defined by the op (no read at the index)",
                 IndexStatus.UNGUARDED: "NOT GUARDED (--no-index-guards)"}


def buckets_text(m: Manifest) -> str:
    """The shape buckets: each dimension's ladder and each padding check (the regions above are
    the smallest bucket's)."""
    assert m.shapes is not None
    lines = [f"shape buckets: {len(m.shapes.buckets)} (the regions above are the first's)"]
    for d in m.shapes.dims:
        where = ", ".join(f"{a.tensor!r} axis {a.axis}" for a in d.inputs)
        lines.append(f"  {d.symbol!r} ({where}){' batch, chunked past the largest' if d.batch else ''}: "
                     f"{', '.join(map(str, d.sizes))}")
    for b in m.shapes.buckets:
        checks = "; ".join(f"{c.symbol} {c.valid}->{c.padded} max abs diff {c.max_abs_diff:.3g}"
                           + (f" (accepted up to {c.accepted_tolerance:g})" if c.accepted_tolerance is not None else "")
                           for c in b.checks) or "no padding to check"
        lines.append(f"  bucket {b.label}: {checks}")
    f = m.shapes.fallback
    lines.append("  past the largest bucket along a non-batch dimension: " + (
        "an error (no --fallback dynamic)" if f is None else
        f"the dynamic host module, checked at {', '.join(f'{s}={n}' for s, n in f.checked)} "
        f"(max abs diff {f.max_abs_diff:.3g})"))
    return "\n".join(lines)


def index_text(m: Manifest) -> str:
    """Every op that indexes with a tensor, and how the bundle keeps its indices in range."""
    counts = Counter(op.status for op in m.index_ops)
    lines = ["indexing ops (" + ", ".join(f"{n} {_INDEX_STATUS[s]}" for s, n in counts.items()) + "):"]
    for op in m.index_ops:
        how = {IndexStatus.CHECKED: f"input {op.input!r} checked", IndexStatus.GUARDED: f"flag {op.flag}"}.get(op.status, "")
        lines.append(f"  {op.op} {op.node}: {_INDEX_STATUS[op.status]}, valid {op.valid} {how}".rstrip())
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} us"


def svg(m: Manifest, rec: BuildRecord, width: int = 1500) -> str:
    """One outlined block per region, in schedule order, flowing left to right and wrapping at
    ``width``; inside a block, nodes go left to right by depth and long regions wrap into bands,
    so a 400-node model stays readable on one screen. Red lines: tensors passed between regions."""
    nodes = rec.graph
    by_name = {n.name: n for n in nodes}
    region_of = {n: r.name for r in rec.regions for n in r.nodes}
    target = {r.name: r.target.backend for r in m.regions}
    producer = {v: n.name for n in nodes for v in n.outputs}
    col_w, row_h, node_w, node_h, pad, head = 64, 22, 58, 16, 10, 30
    per_band = max(1, (width - 2 * pad - 20) // col_w)
    local: dict[str, tuple[int, int]] = {}          # node -> (column, row) inside its region
    size: dict[str, tuple[int, int, int]] = {}      # region -> (columns, rows, bands)
    for r in rec.regions:
        depth: dict[str, int] = {}
        used: dict[int, int] = {}
        for name in r.nodes:  # topological order
            n = by_name[name]
            depth[name] = 1 + max((depth[producer[v]] for v in n.inputs
                                   if producer.get(v) in depth), default=-1)
            local[name] = (depth[name], used.get(depth[name], 0))
            used[depth[name]] = used.get(depth[name], 0) + 1
        cols = max(depth.values(), default=0) + 1
        # at least 3 columns wide, so the block's title fits
        size[r.name] = (max(3, min(cols, per_band)), max(used.values(), default=1), -(-cols // per_band))
    origin: dict[str, tuple[int, int]] = {}
    x, y, line_h = 4, 4, 0
    for name in m.schedule:
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
    for r in rec.regions:
        cols, rows, bands = size[r.name]
        ox, oy = origin[r.name]
        backend = target[r.name]
        color = COLORS.get(backend, "#999")
        out.append(f'<rect x="{ox}" y="{oy}" width="{cols * col_w + 2 * pad}" height="{head + bands * rows * row_h + pad}" '
                   f'fill="{color}" fill-opacity="0.10" stroke="{color}" stroke-width="2" rx="6"/>')
        out.append(f'<text x="{ox + 6}" y="{oy + 14}" font-size="11" font-weight="bold">{html.escape(r.name)} '
                   f'<tspan font-weight="normal">{html.escape(backend)}, {len(r.nodes)} nodes</tspan></text>')
    for n in nodes:
        x2, y2 = pos(n.name)
        for v in n.inputs:
            if v in producer:
                x1, y1 = pos(producer[v])
                cross = region_of[producer[v]] != region_of[n.name]
                style = 'stroke="#c0392b" stroke-width="1.8"' if cross else 'stroke="#777" stroke-width="0.6"'
                out.append(f'<line x1="{x1 + node_w}" y1="{y1 + node_h / 2}" x2="{x2}" y2="{y2 + node_h / 2}" {style}/>')
    for n in nodes:
        x, y = pos(n.name)
        out.append(f'<g><title>{html.escape(n.name)} ({html.escape(n.op)})</title>'
                   f'<rect x="{x}" y="{y}" width="{node_w}" height="{node_h}" rx="3" '
                   f'fill="{COLORS.get(target[region_of[n.name]], "#999")}" stroke="#222" stroke-width="0.4"/>'
                   f'<text x="{x + 3}" y="{y + 11}">{html.escape(n.op[:11])}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def html_page(m: Manifest, rec: BuildRecord | None) -> str:
    esc = html.escape
    if rec is None:
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>aot report: {esc(m.model.name)}</title>"
                f"</head><body><h1>aot report: {esc(m.model.name)}</h1><pre>{esc(text(m, None))}</pre></body></html>\n")
    part = rec.partition
    rows = "".join(
        f"<tr><td>{esc(e.name)}</td><td style='color:{COLORS.get(e.target.backend, '#000')}'>{esc(str(e.target))}</td>"
        f"<td>{len(r.nodes)}</td><td>{r.compute_nodes}</td><td>{r.flops / 1e6:.2f}</td>"
        f"<td>{r.estimated_us:.1f}</td><td>{_measured(r)}</td><td>{_bytes(_nbytes(m, e.inputs))}</td>"
        f"<td>{esc(r.fallback or '')}</td></tr>" for e, r in ((e, rec.region(e.name)) for e in m.regions))
    unsupported = "".join(f"<tr><td>{esc(u.op)}</td><td>{u.count}</td><td>{esc(u.reason)}</td></tr>"
                          for u in (part.coverage.unsupported if part.coverage else ()))
    gate = part.gate
    gate_html = (f"<p><b>Gate:</b> {gate.verdict()} &mdash; {esc(gate.detail)}</p>" if gate
                 else "<p><b>Gate:</b> not applied (no accelerator region, or --no-gate)</p>")
    if gate and (predicted := gate.prediction_line()) is not None:
        gate_html += f"<p>{esc(predicted)}</p>"
    tips = "".join(f"<li>{esc(t)}</li>" for t in part.suggestions)
    tuned = f"<h2>Tuning</h2><pre>{esc(tuning_text(m, rec))}</pre>" if _tuned(m, rec) else ""
    legend = " ".join(f"<span style='background:{c};padding:2px 8px;border-radius:3px'>{esc(t)}</span>" for t, c in COLORS.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>aot report: {esc(m.model.name)}</title>
<style>body{{font-family:sans-serif;margin:20px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}
.pic{{overflow:auto;border:1px solid #ccc}}</style></head><body>
<h1>aot report: {esc(m.model.name)}</h1>
<p>{esc(coverage_line(part.coverage))}; {sum(len(r.nodes) for r in rec.regions)} nodes in {len(m.regions)} region(s);
schedule {esc(' → '.join(m.schedule))}; {esc(overlap_line(m))}; policy {esc(part.policy)}, select {esc(part.select)}.</p>
{gate_html}
<h2>Regions</h2><table><tr><th>region</th><th>target</th><th>nodes</th><th>compute</th><th>MFLOPs</th><th>est. µs</th><th>real µs</th><th>input bytes</th><th>fallback</th></tr>{rows}</table>
<h2>Unsupported operators</h2>{f'<table><tr><th>op</th><th>count</th><th>reason</th></tr>{unsupported}</table>' if unsupported else '<p>none: every node is supported by the accelerator target</p>'}
{f'<h2>Suggestions</h2><ul>{tips}</ul>' if tips else ''}
{f"<h2>Segments</h2><pre>{esc(chr(10).join(segment_lines(part)))}</pre>" if part.segments else ""}
{tuned}
{f"<h2>Indexing ops</h2><pre>{esc(index_text(m))}</pre>" if m.index_ops else ""}
<h2>Graph</h2><p>{legend} &nbsp; red lines: tensors passed between regions; hover a node for its name.</p>
<div class="pic">{svg(m, rec)}</div>
</body></html>
"""


def plan_summary(planned: "Planned") -> str:
    """Coverage, regions, boundary bytes and the gate decision of a plan (`aot plan`)."""
    # Here, not at the top: `aot report` of a bundle needs the manifest only, not onnx.
    from aot.partition.cost import plan_cost
    from aot.partition.support import Group
    from aot.partition.plan import boundaries

    plan, view, record = planned.plan, planned.view, planned.record
    bounds = boundaries(plan, view)
    graph_inputs = set(view.inputs)
    lines = [f"model {planned.source.name!r}: {len(view.nodes)} nodes ({planned.source.folded_nodes} folded), "
             f"{len(plan.regions)} region(s), schedule {' -> '.join(plan.schedule)}",
             coverage_line(record.coverage)]
    lines += [f"  expanded {e.op_type} x{e.count}: {e.reason}" for e in planned.source.expanded]
    for u in record.coverage.unsupported if record.coverage else ():
        lines.append(f"  unsupported {u.op} x{u.count}: {u.reason}")
    total = 0
    for r in plan.regions:
        crossing = [v for v in bounds[r.name].inputs if v not in graph_inputs]
        nbytes = sum(view.values[v].nbytes or 0 for v in crossing)
        total += nbytes
        lines.append(f"  {r.name:5s} {r.device:5s} {len(r.nodes):4d} nodes, "
                     f"{sum(view.node(n).is_compute for n in r.nodes):4d} compute, "
                     f"reads {len(crossing)} boundary tensor(s) = {_bytes(nbytes)}")
    lines.append(f"boundary bytes per run: {_bytes(total)}")
    lines += segment_lines(record)
    lines += record.memory.lines() if record.memory else []
    est = plan_cost({r.name: Group(r.device, r.nodes) for r in plan.regions}, view, planned.cost, plan.schedule)
    lines.append(f"estimated {est.total_us:.1f} us ({est.hops} transfer(s), {est.transfer_us:.1f} us of it)")
    g = plan.gate
    lines.append("gate: " + ("not applied (no accelerator region, or --no-gate)" if g is None
                             else f"{g.verdict()}: {g.detail}"))
    lines += [f"  {p}" for p in [g.prediction_line() if g else None] if p]
    lines += [f"suggestion: {t}" for t in record.suggestions]
    return "\n".join(lines)
