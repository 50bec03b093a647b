"""Human-readable report of a bundle, from its manifest alone."""

from __future__ import annotations

from collections import Counter
from typing import Any


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def text(m: dict[str, Any]) -> str:
    regions = m["regions"]
    bt = m["boundary_tensors"]
    graph_io = {t["name"] for t in (*m["inputs"], *m["outputs"])}
    total_nodes = sum(len(r["nodes"]) for r in regions)
    lines = [f"model {m['model']['name']!r}  sha256 {m['model']['sha256'][:12]}  opset {m['model']['opset']}",
             f"{total_nodes} nodes in {len(regions)} region(s); schedule: {' -> '.join(m['schedule'])}", ""]
    by_target = Counter()
    for r in regions:
        by_target[r["target"]] += len(r["nodes"])
    lines.append("nodes per target: " + ", ".join(f"{t} {n} ({100 * n / max(total_nodes, 1):.1f}%)"
                                                 for t, n in sorted(by_target.items())))
    lines.append("")
    lines.append(f"{'region':8s} {'target':22s} {'driver':11s} {'nodes':>5s} {'compute':>7s} {'in bytes':>10s} {'out bytes':>10s}")
    crossing = 0
    for r in regions:
        ins = sum(bt[v]["bytes"] or 0 for v in r["inputs"])
        outs = sum(bt[v]["bytes"] or 0 for v in r["outputs"])
        crossing += sum(bt[v]["bytes"] or 0 for v in r["inputs"] if v not in graph_io)
        lines.append(f"{r['name']:8s} {r['target'] + ':' + r['arch']:22s} {r['driver']:11s} {len(r['nodes']):5d} "
                     f"{r['compute_nodes']:7d} {_bytes(ins):>10s} {_bytes(outs):>10s}")
        if r["fallback"]:
            lines.append(f"         fell back to the host: {r['fallback'][:300]}")
    lines.append(f"\nbytes passed between regions per run: {_bytes(crossing)}")
    lines.append("\nboundary tensors:")
    for r in regions:
        for v in r["inputs"]:
            if v not in graph_io:
                t = bt[v]
                lines.append(f"  {v!r:40.40s} -> {r['name']}: {t['dtype']}{t['shape']} {_bytes(t['bytes'])}")
    reasons = Counter(m["host_reasons"].values())
    if reasons:
        lines.append("\nwhy nodes are on the host:")
        for reason, n in reasons.most_common():
            lines.append(f"  {n:4d} x {reason}")
    return "\n".join(lines)
