"""`tessera explain`: the placement of a model, partition by partition, and for each node why
it went where it did."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tessera.cli import _common as common
from tessera.cli._app import cli
from tessera.cli._progress import interrupted_exit, progress_display

if TYPE_CHECKING:
    from tessera.config import AccuracyBudget


@cli.command("explain", epilog=common.TARGET_FLAGS_HELP, context_settings=common.TARGET_FLAGS)
@click.argument("model", type=click.Path(dir_okay=False))
@common.target_option(required=False, note=" (not for a .tess artifact)")
@common.executor_option()
@common.option_option("partitioner=greedy")
@common.pin_option()
@common.shape_option()
@common.shape_profile_option()
@common.samples_option()
@common.objective_options()
@click.option("--json", "as_json", is_flag=True, help="Print the Plan as JSON.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False),
              help="Also draw the placement as one self-contained HTML page.")
@click.pass_context
def explain_command(ctx: click.Context, model: str, targets: str | None,
                    executor: str | None, options: tuple[str, ...], pins: tuple[str, ...],
                    shapes: tuple[str, ...],
                    profile: tuple[str, ...], samples: str | None, objective: str | None,
                    concurrency: int | None, as_json: bool, html_out: str | None) -> None:
    """Show where each node of MODEL (an .onnx model, or a saved .tess artifact) runs, and
    why."""
    from tessera.errors import ConfigError
    from tessera.ir import load_model

    if model.endswith(".tess"):
        from tessera.runtime._artifact import read

        if samples:
            raise ConfigError("--samples is for an .onnx model: a .tess artifact shows the "
                              "accuracy recorded when it was compiled")
        if profile:
            raise ConfigError("--shape-profile is for an .onnx model: a .tess artifact keeps "
                              "the profile it was compiled with")
        if objective is not None or concurrency is not None:
            raise ConfigError("--objective and --concurrency are for an .onnx model: a .tess "
                              "artifact shows the race run when it was compiled")
        artifact = read(model)
        loaded = load_model(artifact.model("model.onnx"), require_static=False)
        from tessera.placement.search import assign_devices

        plan = assign_devices(artifact.plan, artifact.config)  # saved before device targets
        budget = artifact.config.options.accuracy
    else:
        from tessera.runtime import partition

        if not targets:
            raise ConfigError("explain MODEL.onnx needs targets: -t onnxruntime,openvino,...")
        config = common.config_from_cli(
            common.expand_targets(targets), None, executor, None,
            (*common.objective_flags(objective, concurrency), *common.profile_flags(profile),
             *options), ctx.args)
        loaded = load_model(model, common.parse_shapes(shapes), require_static=False,
                            verify=config.options.verify)
        bar, update = progress_display()
        with bar:
            plan = partition(loaded, config, pins=common.cli_pins(loaded, pins),
                             samples=samples, progress=update)
        budget = config.options.accuracy
    if html_out:
        from tessera._private.cache import atomic_write_bytes
        from tessera.cli._html import render_html

        atomic_write_bytes(Path(html_out), render_html(plan, loaded, Path(model).name).encode())
    if as_json:
        click.echo(plan.to_json())
    else:
        click.echo(render(plan, loaded, Path(model).name, budget))
        if html_out:
            click.echo(f"\nplacement picture written to {html_out}")
    stopped = plan.stats.interrupted
    if stopped is not None and not model.endswith(".tess"):
        interrupted_exit(ctx, stopped, f"kept {stopped.kept}")


def render(plan: object, model: object, label: str,
           budget: AccuracyBudget | None = None) -> str:
    from tessera.ir import Model
    from tessera.placement import Plan

    assert isinstance(plan, Plan) and isinstance(model, Model)
    flow = model.dataflow
    ops = dict(zip(flow.names, (n.op_type for n in flow.nodes), strict=True))
    lines = [f"model {label}: {len(flow)} nodes; partitioner {plan.partitioner}"]
    stats = plan.stats
    lines += [line for line in (common.interrupted_line(stats), common.search_line(stats),
                                common.end_to_end_line(stats)) if line is not None]
    lines.append(common.accuracy_line(stats, budget))
    lines += common.precision_lines(stats)
    lines += common.shape_lines(stats)
    guard = stats.guard
    if guard is not None and guard.cost:
        lines.append(guard.cost)
    if guard is not None and guard.disagreements:  # the guard's evidence, by the consensus
        lines.append(f"disagreements with the consensus: {len(guard.disagreements)}")
        lines += [f"  {d}" for d in guard.disagreements]
    if stats.proposals:  # subgraphs backends proposed, and what became of them
        lines.append(f"proposals: {len(stats.proposals)}")
        lines += [f"  {p}" for p in stats.proposals]
    measuring = stats.measuring
    lost = [e for e in measuring.invalid_examples if e.fault is not None] if measuring else []
    if measuring and lost:
        lines.append(f"{measuring.invalid} candidate(s) invalid; these crashed or hung in the "
                     "measuring worker and were left out:")
        lines += [f"  {e}" for e in lost]
    lines.append("")
    for i, part in enumerate(plan.partitions):
        counts = Counter(ops[n] for n in part.nodes)
        summary = ", ".join(f"{op}×{c}" if c > 1 else op for op, c in counts.items())
        cost = f", {part.cost_ms:.3f} ms" if part.cost_ms is not None else ""
        precision = common.partition_precision(stats, i, part.target)
        points = common.partition_points(stats, i)
        lines.append(f"[{i}] {part.target}: {len(part.nodes)} node(s){cost}{points}"
                     f"{precision}: {summary}")
        lines.append(f"    in: {', '.join(part.inputs) or '-'}; out: {', '.join(part.outputs)}")
        lines += device_lines(part)
    lines += ["", "nodes:"]
    where = {n: str(p.target) for p in plan.partitions for n in p.nodes}
    for name in flow.names:
        lines.append(f"  {name} ({ops[name]}) -> {where[name]}: "
                     f"{plan.decisions.get(name, '')}")
        for target, reason in plan.reasons.get(name, {}).items():
            if target != where[name]:
                lines.append(f"      {target}: {reason}")
    return "\n".join(lines)


def device_lines(part: object) -> list[str]:
    """The partition's device target, and each of its attributes the backend cannot honour."""
    from tessera import backends
    from tessera.errors import BackendUnavailableError
    from tessera.placement import Partition

    assert isinstance(part, Partition)
    if part.device is None:  # a plan made before device targets were assigned
        return []
    lines = [f"    device: {part.device}"]
    try:
        backend = backends.get(part.target.kind.name)
    except BackendUnavailableError as err:  # an artifact's backend missing here
        return [*lines, f"    device note: not known here: {err}"]
    notes = backend.device_settings(part.target, part.device).notes
    return lines + [f"    device note: {note}" for note in notes]
