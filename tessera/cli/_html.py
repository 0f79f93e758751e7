"""The placement as a picture: one self-contained HTML file with an SVG drawing.

Partitions are drawn as bands, top to bottom in plan order (a plan's order is topological,
so every edge points down), each band boxed and coloured by its target. Inside a band, nodes
sit in rows by their depth within the partition. Chains of three or more nodes of one
partition collapse into one box, and Constant nodes are folded into their consumers, so a
500-node model stays readable. Hover shows a node's op; a click shows its shapes, why it
went where it did, and every other backend's answer.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

from tessera import backends
from tessera.ir import Model, ValueType
from tessera.placement import Plan

SPARE = ["#17becf", "#8c564b", "#e377c2", "#393b79", "#637939", "#843c39"]
NODE_W, NODE_H, GAP_X, GAP_Y, BAND_PAD, TOP = 150, 30, 20, 22, 16, 28


@dataclass
class Box:
    """One drawn box: a node, or a collapsed chain of nodes."""

    members: list[int]
    partition: int
    producers: list[int] = field(default_factory=list)  # box indices
    row: int = 0
    x: float = 0.0
    y: float = 0.0


def colours(plan: Plan) -> dict[str, str]:
    chosen: dict[str, str] = {}
    spare = iter(SPARE)
    for part in plan.partitions:
        if str(part.target) in chosen:
            continue
        backend = backends.BACKENDS.find(part.kind)
        base = backend.colour if backend is not None else None
        chosen[str(part.target)] = base if base and base not in chosen.values() else next(spare,
                                                                                    "#444444")
    return chosen


def boxes_for(model: Model, plan: Plan) -> list[Box]:
    flow = model.dataflow
    index = {name: i for i, name in enumerate(flow.names)}
    part_of = {n: i for i, p in enumerate(plan.partitions) for n in p.nodes}
    where = [part_of[name] for name in flow.names]
    hidden = {i for i, node in enumerate(flow.nodes)
              if node.op_type == "Constant" and not flow.producers[i]}
    box_of: dict[int, int] = {}
    boxes: list[Box] = []
    for part_index, part in enumerate(plan.partitions):
        for name in part.nodes:
            i = index[name]
            if i in hidden:
                continue
            preds = [p for p in flow.producers[i] if p not in hidden]
            # extend a chain: one visible producer in this partition, whose only consumer is i
            if len(preds) == 1 and where[preds[0]] == part_index and preds[0] in box_of:
                head = preds[0]
                consumers = [c for c in flow.consumers[head] if c not in hidden]
                chain = boxes[box_of[head]]
                if consumers == [i] and chain.members[-1] == head:
                    chain.members.append(i)
                    box_of[i] = box_of[head]
                    continue
            box_of[i] = len(boxes)
            boxes.append(Box([i], part_index))
    # a chain of two is clearer as two boxes
    final: list[Box] = []
    remap: dict[int, int] = {}
    for box in boxes:
        pieces = [box.members] if len(box.members) != 2 else [[m] for m in box.members]
        for piece in pieces:
            for m in piece:
                remap[m] = len(final)
            final.append(Box(piece, box.partition))
    for box in final:
        seen: list[int] = []
        for p in flow.producers[box.members[0]]:
            target = remap.get(p)
            if target is not None and target not in seen:
                seen.append(target)
        box.producers = seen
    return final


def layout(boxes: list[Box], count: int) -> tuple[list[tuple[float, float, float]], float]:
    """Rows within each partition's band, barycentre order in a row; returns each band's
    (top, height, width) and the picture's width."""
    rows: dict[int, dict[int, list[int]]] = {}
    for index, box in enumerate(boxes):
        same = [boxes[p].row + 1 for p in box.producers if boxes[p].partition == box.partition]
        box.row = max(same, default=0)
        rows.setdefault(box.partition, {}).setdefault(box.row, []).append(index)
    bands = []
    top = float(TOP)
    width = 0.0
    for part in range(count):
        part_rows = rows.get(part, {0: []})
        height = BAND_PAD * 2 + 18 + len(part_rows) * (NODE_H + GAP_Y) - GAP_Y
        widest = 0.0
        for row_index in sorted(part_rows):
            members = part_rows[row_index]
            members.sort(key=lambda b: _barycentre(boxes, b))
            for slot, b in enumerate(members):
                boxes[b].x = BAND_PAD + slot * (NODE_W + GAP_X)
                boxes[b].y = top + BAND_PAD + 18 + row_index * (NODE_H + GAP_Y)
            widest = max(widest, len(members) * (NODE_W + GAP_X))
        bands.append((top, float(height), widest + BAND_PAD))
        width = max(width, widest + 2 * BAND_PAD)
        top += height + GAP_Y
    return bands, max(width, 520.0)


def _barycentre(boxes: list[Box], index: int) -> float:
    xs = [boxes[p].x for p in boxes[index].producers]
    return sum(xs) / len(xs) if xs else float(index)


def render_html(plan: Plan, model: Model, label: str) -> str:
    flow = model.dataflow
    colour = colours(plan)
    boxes = boxes_for(model, plan)
    bands, width = layout(boxes, len(plan.partitions))
    height = bands[-1][0] + bands[-1][1] + GAP_Y if bands else 100.0
    svg: list[str] = []
    for i, (part, (top, band_h, band_w)) in enumerate(zip(plan.partitions, bands, strict=True)):
        cost = f" · {part.cost_ms:.3f} ms" if part.cost_ms is not None else ""
        name = str(part.target)
        svg.append(
            f'<rect class="partition" data-partition="{i}" data-target="{_a(name)}" '
            f'x="4" y="{top}" width="{max(band_w, width - 8)}" height="{band_h}" rx="8" '
            f'style="fill:{colour[name]}1f;stroke:{colour[name]}"/>'
            f'<text class="band" x="14" y="{top + 17}">[{i}] {_t(name)} · '
            f'{len(part.nodes)} node(s){cost}</text>')
    for index, box in enumerate(boxes):
        for p in box.producers:
            src = boxes[p]
            x1, y1 = src.x + NODE_W / 2, src.y + NODE_H
            x2, y2 = box.x + NODE_W / 2, box.y
            mid = (y1 + y2) / 2
            svg.insert(0, f'<path class="edge" d="M{x1},{y1} C{x1},{mid} {x2},{mid} '
                          f'{x2},{y2}"/>')
        ops = [flow.nodes[m].op_type for m in box.members]
        text = ops[0] if len(ops) == 1 else f"{len(ops)} nodes: {ops[0]}…{ops[-1]}"
        target = str(plan.partitions[box.partition].target)
        svg.append(
            f'<g class="node" data-box="{index}"><title>{_t(" → ".join(ops[:12]))}</title>'
            f'<rect x="{box.x}" y="{box.y}" width="{NODE_W}" height="{NODE_H}" rx="5" '
            f'style="fill:{colour[target]}"/><text x="{box.x + NODE_W / 2}" '
            f'y="{box.y + 19}">{_t(text[:22])}</text></g>')
    details = [_details(plan, model, box) for box in boxes]
    legend = "".join(
        f'<span class="key"><i style="background:{c}"></i>{_t(t)}: '
        f'{sum(len(p.nodes) for p in plan.partitions if str(p.target) == t)} nodes in '
        f'{sum(str(p.target) == t for p in plan.partitions)} partition(s)</span>'
        for t, c in colour.items())
    total = plan.cost_ms
    summary = (f"{len(flow)} nodes · {len(plan.partitions)} partitions · partitioner "
               f"{plan.partitioner}" + (f" · modelled {total:.3f} ms" if total else ""))
    return _PAGE.format(
        title=_t(label), summary=_t(summary), legend=legend, width=width, height=height,
        svg="\n".join(svg), data=json.dumps(details).replace("<", "\\u003c"))


def _details(plan: Plan, model: Model, box: Box) -> dict[str, Any]:
    flow = model.dataflow
    types = flow.value_types
    part = plan.partitions[box.partition]
    nodes = []
    for m in box.members:
        node = flow.nodes[m]
        name = flow.names[m]
        shapes = {v: _shape(types.get(v)) for v in [*node.input, *node.output] if v}
        nodes.append({"name": name, "op": node.op_type, "shapes": shapes,
                      "decision": plan.decisions.get(name, ""),
                      "others": {t: r for t, r in plan.reasons.get(name, {}).items()
                                 if t != str(part.target)}})
    return {"partition": box.partition, "target": str(part.target), "nodes": nodes}


def _shape(value_type: ValueType | None) -> list[int | str | None] | str:
    shape = value_type.shape if value_type is not None else None
    return list(shape) if shape is not None else "?"


def _t(text: str) -> str:
    return html.escape(text, quote=False)


def _a(text: str) -> str:
    return html.escape(text, quote=True)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tessera placement: {title}</title>
<style>
body{{font:13px system-ui,sans-serif;margin:0;color:#222;display:flex;height:100vh}}
#main{{flex:1;overflow:auto;padding:12px}} #side{{width:360px;overflow:auto;padding:12px;
border-left:1px solid #ddd;background:#fafafa}}
h1{{font-size:16px;margin:0 0 4px}} .summary{{color:#555;margin-bottom:8px}}
.key{{display:inline-block;margin:0 14px 6px 0}} .key i{{display:inline-block;width:12px;
height:12px;margin-right:5px;vertical-align:-1px;border-radius:2px}}
.edge{{fill:none;stroke:#999;stroke-width:1.2}} .node text{{fill:#fff;font-size:11px;
text-anchor:middle;pointer-events:none}} .node{{cursor:pointer}} .node:hover rect{{
stroke:#000;stroke-width:2}} .band{{font-size:12px;font-weight:600;fill:#333}}
.selected rect{{stroke:#000;stroke-width:3}} code{{font-size:12px}} td{{vertical-align:top;
padding:1px 6px 1px 0}}
</style></head><body>
<div id="main"><h1>{title}</h1><div class="summary">{summary}</div>
<div class="legend">{legend}</div>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">
{svg}
</svg></div>
<div id="side"><b>Click a node</b> to see its op, shapes and why it was placed there.</div>
<script id="details" type="application/json">{data}</script>
<script>
const details = JSON.parse(document.getElementById("details").textContent);
const esc = s => String(s).replace(/[&<>"]/g, c => ({{"&":"&amp;","<":"&lt;",">":"&gt;",
  '"':"&quot;"}})[c]);
function show(index) {{
  document.querySelectorAll(".node").forEach(g => g.classList.toggle("selected",
    g.dataset.box === String(index)));
  const d = details[index];
  let out = `<h1>partition ${{d.partition}}: ${{esc(d.target)}}</h1>`;
  for (const n of d.nodes) {{
    out += `<p><b>${{esc(n.op)}}</b> <code>${{esc(n.name)}}</code><br>${{esc(n.decision)}}</p>`;
    out += "<table>" + Object.entries(n.shapes).map(([v, s]) =>
      `<tr><td><code>${{esc(v)}}</code></td><td>${{esc(JSON.stringify(s))}}</td></tr>`).join("")
      + "</table>";
    const others = Object.entries(n.others);
    if (others.length) out += "<p>other backends:</p><table>" + others.map(([t, r]) =>
      `<tr><td>${{esc(t)}}</td><td>${{esc(r)}}</td></tr>`).join("") + "</table>";
  }}
  document.getElementById("side").innerHTML = out;
}}
document.querySelectorAll(".node").forEach(g => g.addEventListener("click",
  () => show(Number(g.dataset.box))));
// for automated checks: what the browser actually painted
document.querySelectorAll("rect.partition").forEach(r =>
  r.setAttribute("data-painted", getComputedStyle(r).stroke));
document.body.dataset.ready = "1";
</script></body></html>
"""

__all__ = ["render_html"]
