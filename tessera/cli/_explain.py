"""`tessera explain`: the placement of a model, partition by partition, and for each node why
it went where it did."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click

from tessera.cli._app import cli
from tessera.cli._targets import config_from_cli


def parse_pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    from tessera.errors import ConfigError

    pairs = {}
    for item in items:
        key, has_value, value = item.rpartition("=")
        if not has_value or not key:
            raise ConfigError(f"{what} expects NAME=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def parse_shapes(items: tuple[str, ...]) -> dict[str, list[int]] | None:
    from tessera.errors import ConfigError

    shapes = {}
    for name, dims in parse_pairs(items, "--input-shape").items():
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ConfigError(f"--input-shape {name}={dims}: dimensions must be integers, "
                              "e.g. x=1,3,224,224") from None
    return shapes or None


@cli.command("explain", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True})
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-t", "--target", "targets",
              help='Targets in priority order, e.g. "onnxruntime,openvino,torch" (not needed '
                   "for a .tess artifact).")
@click.option("--option", "-o", "options", multiple=True, metavar="NAME=VALUE",
              help="Flow option, e.g. -o partitioner=greedy (repeatable).")
@click.option("--pin", "pins", multiple=True, metavar="NODE=TARGET",
              help="Pin a node (or 're:<regex>' of names) to a target (repeatable).")
@click.option("--input-shape", "shapes", multiple=True, metavar="NAME=D1,D2,...",
              help="Fix a dynamic input shape (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the Plan as JSON.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False),
              help="Also draw the placement as one self-contained HTML page.")
@click.pass_context
def explain_command(ctx: click.Context, model: str, targets: str | None,
                    options: tuple[str, ...], pins: tuple[str, ...], shapes: tuple[str, ...],
                    as_json: bool, html_out: str | None) -> None:
    """Show where each node of MODEL (an .onnx model, or a saved .tess artifact) runs, and
    why."""
    from tessera.ir import load_model

    if model.endswith(".tess"):
        from tessera.runtime._artifact import read

        artifact = read(model)
        loaded = load_model(artifact.model("model.onnx"))
        plan = artifact.plan
    else:
        from tessera.cli._build import cli_pins, expand_targets
        from tessera.errors import ConfigError
        from tessera.runtime import partition

        if not targets:
            raise ConfigError("explain MODEL.onnx needs targets: -t onnxruntime,openvino,...")
        config = config_from_cli(expand_targets(targets), None, None, None, options, ctx.args)
        loaded = load_model(model, parse_shapes(shapes), verify=config.options.verify)
        plan = partition(loaded, config, pins=cli_pins(loaded, pins))
    if html_out:
        from tessera._private.cache import atomic_write_bytes
        from tessera.cli._html import render_html

        atomic_write_bytes(Path(html_out), render_html(plan, loaded, Path(model).name).encode())
    if as_json:
        click.echo(plan.to_json())
        return
    click.echo(render(plan, loaded, Path(model).name))
    if html_out:
        click.echo(f"\nplacement picture written to {html_out}")


def end_to_end_line(stats: dict[str, Any]) -> str:
    """How the rival plans timed end to end, and which was kept."""
    timings = ", ".join(f"{k} {v:.3f} ms" if isinstance(v, float) else f"{k}: {v}"
                        for k, v in stats["end_to_end_ms"].items())
    return f"end to end: {timings}; kept {stats['kept']}"


def render(plan: object, model: object, label: str) -> str:
    from tessera.ir import Model
    from tessera.placement import Plan

    assert isinstance(plan, Plan) and isinstance(model, Model)
    flow = model.dataflow
    ops = dict(zip(flow.names, (n.op_type for n in flow.nodes), strict=True))
    lines = [f"model {label}: {len(flow)} nodes; partitioner {plan.partitioner}"]
    stats = plan.stats
    if stats.get("candidates"):
        lines.append(
            f"search: {stats['candidates']} candidates, {stats['measurements']} measured, "
            f"{stats['cache_hits']} from the cost database; measuring "
            f"{stats.get('measure_seconds', 0.0):.2f} s, search {stats['search_seconds']:.3f} s")
    if "end_to_end_ms" in stats:
        lines.append(end_to_end_line(stats))
    lost = [line for line in stats.get("invalid_examples", [])
            if ": crashed" in line or ": hung" in line or "ran out of memory" in line]
    if lost:
        lines.append(f"{stats['invalid']} candidate(s) invalid; these crashed or hung in the "
                     "measuring worker and were left out:")
        lines += [f"  {line}" for line in lost]
    lines.append("")
    for i, part in enumerate(plan.partitions):
        counts = Counter(ops[n] for n in part.nodes)
        summary = ", ".join(f"{op}×{c}" if c > 1 else op for op, c in counts.items())
        cost = f", {part.cost_ms:.3f} ms" if part.cost_ms is not None else ""
        lines.append(f"[{i}] {part.target}: {len(part.nodes)} node(s){cost}: {summary}")
        lines.append(f"    in: {', '.join(part.inputs) or '-'}; out: {', '.join(part.outputs)}")
    lines += ["", "nodes:"]
    where = {n: p.target for p in plan.partitions for n in p.nodes}
    for name in flow.names:
        lines.append(f"  {name} ({ops[name]}) -> {where[name]}: "
                     f"{plan.decisions.get(name, '')}")
        for target, reason in plan.reasons.get(name, {}).items():
            if target != where[name]:
                lines.append(f"      {target}: {reason}")
    return "\n".join(lines)
