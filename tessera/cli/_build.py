"""`tessera compile`, `tessera run` and `tessera bench`: compile once to a `.tess` artifact,
run it on numpy inputs, and compare against every backend run natively."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tessera.cli._app import cli, console
from tessera.cli._common import (
    TARGET_FLAGS,
    TARGET_FLAGS_HELP,
    accuracy_line,
    cli_pins,
    config_from_cli,
    end_to_end_line,
    executor_option,
    expand_targets,
    interrupted_line,
    measure_flags,
    measure_options,
    objective_flags,
    objective_options,
    option_option,
    parse_pairs,
    parse_shapes,
    pin_option,
    placement_table,
    precision_lines,
    profile_flags,
    samples_option,
    search_line,
    shape_option,
    shape_profile_option,
    target_option,
)
from tessera.cli._progress import interrupted_exit, progress_display

if TYPE_CHECKING:
    import numpy as np
    from rich.table import Table

    from tessera.config import CompilationConfig
    from tessera.placement import Plan

def build_config(targets: str, options: tuple[str, ...], extra: list[str],
                 executor: str | None = None, **flow: Any) -> CompilationConfig:
    chosen = [f"{k.replace('_', '-')}={v}" for k, v in flow.items() if v is not None]
    return config_from_cli(expand_targets(targets), None, executor, None, (*chosen, *options),
                           extra)


# -- compile -------------------------------------------------------------------------------
@cli.command("compile", epilog=TARGET_FLAGS_HELP, context_settings=TARGET_FLAGS)
@click.argument("model", type=click.Path(dir_okay=False))
@target_option()
@executor_option()
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Artifact to write (default: MODEL with the suffix .tess).")
@click.option("--partitioner", type=click.Choice(["auto", "greedy", "collage"]),
              help="Placement: greedy by priority, or Collage's measured search.")
@pin_option()
@click.option("--min-block-size", type=int, help="Smallest partition greedy hands a backend.")
@click.option("--fallback", type=click.Choice(["on", "off"]),
              help="Place what no backend runs on the reference (default on).")
@click.option("--threads", type=click.Choice(["auto", "native", "shared"]),
              help="Thread policy (default auto: native for one partition, else shared).")
@samples_option()
@click.option("--accuracy", metavar="SPEC",
              help="Accuracy budget against the consensus fp32 answers on the samples, e.g. "
                   "cosine>=0.999,top1>=0.99 (also max-abs<=X, max-rel<=X).")
@objective_options()
@measure_options()
@option_option("max-candidate-size=2")
@shape_option()
@shape_profile_option()
@click.pass_context
def compile_command(ctx: click.Context, model: str, targets: str, executor: str | None,
                    output: str | None,
                    partitioner: str | None, pins: tuple[str, ...], min_block_size: int | None,
                    fallback: str | None, threads: str | None, samples: str | None,
                    accuracy: str | None, objective: str | None, concurrency: int | None,
                    measure: str | None, ray_address: str | None, measure_on: str | None,
                    options: tuple[str, ...], shapes: tuple[str, ...],
                    profile: tuple[str, ...]) -> None:
    """Place MODEL on the targets, compile every partition and save one artifact."""
    from tessera.ir import Samples, load_model
    from tessera.runtime import compile as compile_model

    options = (*objective_flags(objective, concurrency),
               *measure_flags(measure, ray_address, measure_on), *profile_flags(profile),
               *options)
    config = build_config(targets, options, ctx.args, executor, partitioner=partitioner,
                          min_block_size=min_block_size, fallback=fallback, threads=threads,
                          accuracy=accuracy)
    loaded = load_model(model, parse_shapes(shapes), require_static=False,
                        verify=config.options.verify)
    checked = Samples.load(samples, loaded) if samples else None  # before any measuring
    out = Path(output) if output else Path(model).with_suffix(".tess")
    bar, update = progress_display()
    with bar:
        compiled = compile_model(loaded, config, pins=cli_pins(loaded, pins), progress=update,
                                 samples=checked)
    show = console()
    plan = compiled.plan
    show.print(placement_table(plan, loaded, f"{Path(model).name}: {len(loaded.dataflow)} "
                                             f"nodes, {plan.partitioner}, threads "
                                             f"{compiled.policy.name}"))
    print_plan_stats(plan)
    if checked is not None or config.options.accuracy is not None:
        click.echo(accuracy_line(plan.stats, config.options.accuracy))
    for line in precision_lines(plan.stats):
        click.echo(line)
    compiled.save(out)
    click.echo(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)")
    stopped = plan.stats.interrupted
    if stopped is not None:
        interrupted_exit(ctx, stopped, f"kept {stopped.kept}, saved to {out}")


def print_plan_stats(plan: Plan) -> None:
    for line in (interrupted_line(plan.stats), search_line(plan.stats),
                 end_to_end_line(plan.stats),
                 plan.stats.guard.cost if plan.stats.guard is not None else None):
        if line is not None:
            click.echo(line)


# -- run -----------------------------------------------------------------------------------
@cli.command("run")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("-i", "--input", "inputs", multiple=True, metavar="NAME=FILE.npy",
              help="One input from a .npy file (repeatable).")
@click.option("--inputs", "npz", type=click.Path(dir_okay=False, exists=True),
              help="All inputs from one .npz file.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the outputs to this .npz file.")
@click.option("--bench", "runs", type=int, default=0, metavar="N",
              help="Also time N runs and print median, p90 and min latency.")
@click.option("--check", is_flag=True,
              help="Compare the outputs with the consensus of independent "
                   "implementations (ONNX Runtime unoptimised, onnx.reference, ...) on the "
                   "source model.")
@click.option("--allow-fallback", is_flag=True,
              help="Re-place partitions whose backend is missing or changed version.")
@shape_option()
def run_command(artifact: str, inputs: tuple[str, ...], npz: str | None, output: str | None,
                runs: int, check: bool, allow_fallback: bool, shapes: tuple[str, ...]
                ) -> None:
    """Load ARTIFACT (no measuring) and run it on inputs from files, or on random inputs of
    the model's shapes (of --input-shape where the model has symbolic dimensions)."""
    import warnings

    from tessera.runtime import load

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = load(artifact, allow_fallback=allow_fallback)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    feeds = read_inputs(compiled, inputs, npz, parse_shapes(shapes))
    results = compiled.run(feeds)
    show = console()
    show.print(outputs_table(results))
    if output:
        save_npz(Path(output), results)
        click.echo(f"outputs written to {output}")
    if runs:
        from tessera._private.timing import time_block

        latency = time_block(lambda: compiled.run(feeds), warmup=min(3, runs), min_runs=runs,
                             max_runs=runs, seconds=0.0)
        click.echo(f"latency over {latency.runs} runs: median {latency.median_ms:.3f} ms, "
                   f"p90 {latency.p90_ms:.3f} ms, min {latency.min_ms:.3f} ms")
    if check:
        check_against_consensus(compiled, feeds, results)


def read_inputs(compiled: Any, items: tuple[str, ...], npz: str | None,
                shapes: dict[str, list[int]] | None = None) -> dict[str, np.ndarray]:
    import numpy as np

    from tessera.backends import random_inputs
    from tessera.errors import InputError

    feeds: dict[str, np.ndarray] = {}
    if npz:
        with np.load(npz, allow_pickle=False) as data:
            feeds.update({name: data[name] for name in data.files})
    for name, file in parse_pairs(items, "--input").items():
        try:
            feeds[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise InputError(f"--input {name}={file}: cannot read a .npy array: {err}") from None
    if feeds:
        if shapes:
            raise InputError("--input-shape shapes random inputs: leave it out when giving "
                             "inputs with --input or --inputs")
        return feeds
    specs = {s.name: s for s in compiled.inputs}
    for name, shape in (shapes or {}).items():
        spec = specs.get(name)
        if spec is None:
            raise InputError(f"--input-shape names {name!r}, not an input of the model "
                             f"(inputs: {', '.join(specs)})")
        fixed = spec.shape is not None and all(isinstance(d, int) for d in spec.shape)
        if fixed and tuple(shape) != tuple(spec.shape):
            raise InputError(f"--input-shape {name}={','.join(map(str, shape))}: input "
                             f"{name!r} has the fixed shape {list(spec.shape)}")
    generated = random_inputs(compiled, shapes=shapes)
    if generated is None:
        raise InputError(dynamic_inputs_message(compiled, shapes or {}))
    return generated


def dynamic_inputs_message(compiled: Any, shapes: dict[str, list[int]]) -> str:
    """What to give for random inputs of a model with symbolic dimensions, with an example
    at the profile's first point (each dimension's default size without a profile)."""
    from tessera.backends import shapes_at
    from tessera.config import ShapeProfile

    symbols = compiled.model.symbols
    profile = compiled.config.options.shapes or ShapeProfile(())
    example = shapes_at(compiled, profile.points(symbols)[0].as_dict())
    wanted = [s.name for s in compiled.inputs if s.name not in shapes]
    flags = " ".join(f"--input-shape {n}={','.join(map(str, example[n]))}"
                     for n in wanted if n in example)
    return (f"the model has symbolic dimensions ({', '.join(symbols)}): give the shapes of "
            f"its random inputs ({flags or '--input-shape NAME=D1,D2,...'}), or inputs with "
            "--input or --inputs")


def outputs_table(results: dict[str, np.ndarray]) -> Table:
    import numpy as np
    from rich.table import Table

    table = Table(title="outputs", title_justify="left")
    for column in ("name", "dtype", "shape", "mean", "first values"):
        table.add_column(column)
    for name, value in results.items():
        array = np.asarray(value)
        numeric = array.dtype.kind in "biuf"
        mean = f"{float(array.mean()):.6g}" if numeric and array.size else "-"
        first = np.array2string(array.reshape(-1)[:4], precision=4, separator=", ")
        table.add_row(name, str(array.dtype), str(list(array.shape)), mean, first)
    return table


def save_npz(path: Path, results: dict[str, np.ndarray]) -> None:
    import io

    import numpy as np

    from tessera._private.cache import atomic_write_bytes

    buffer = io.BytesIO()
    np.savez(buffer, **results)  # type: ignore[arg-type]
    atomic_write_bytes(path, buffer.getvalue())


def check_against_consensus(compiled: Any, feeds: dict[str, np.ndarray],
                            results: dict[str, np.ndarray]) -> None:
    """`run --check`: the results against the consensus oracle's fp32 answers (within the
    plan's accuracy budget, where it has one)."""
    from tessera._private.numeric import ATOL, RTOL
    from tessera.config import AccuracyBudget
    from tessera.errors import ExecutionError
    from tessera.oracle import agree_all, answers
    from tessera.placement.record import RivalKind

    truth = answers(compiled.model.proto, [feeds])
    want = truth.outputs[0]
    budget = compiled.config.options.accuracy
    record = compiled.plan.stats.precision
    if budget is None and record is not None and record.kept.kind is not RivalKind.FP32 \
            and record.budget:
        budget = AccuracyBudget.parse(record.budget)  # the default budget it was kept under
    if budget is not None and not budget.exact:  # a plan chosen under a budget is judged by it
        from tessera.config import accuracy_of

        report = accuracy_of([results], [want], budget, truth.judges)
        if not report.met:
            raise ExecutionError(f"{report.summary()}; the compiled model misses its "
                                 "accuracy budget")
        click.echo(f"check: all {len(want)} output(s) within the plan's accuracy budget "
                   f"{budget} ({report.summary()})")
        return
    verdict = agree_all([results], [want])
    if not verdict.ok:
        raise ExecutionError(f"{verdict.why.replace('the other', 'the expected')} (tolerance "
                             f"rtol {RTOL:g}, atol {ATOL:g}); the compiled model disagrees "
                             f"with {truth.judges}")
    click.echo(f"check: all {len(want)} output(s) match {truth.judges} (max abs error "
               f"{verdict.max_abs_error:.3g})")


# -- bench ---------------------------------------------------------------------------------
@cli.command("bench", epilog=TARGET_FLAGS_HELP, context_settings=TARGET_FLAGS)
@click.argument("model", type=click.Path(dir_okay=False))
@target_option()
@executor_option()
@click.option("--seconds", type=float, default=1.0, show_default=True,
              help="Timing budget per row.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="Also write the rows as JSON.")
@click.option("--save", "save_to", type=click.Path(dir_okay=False),
              help="Save tessera's plan (the Collage row; with --samples, the tessera row) "
                   "as an artifact.")
@click.option("--samples", type=click.Path(exists=True), metavar="PATH",
              help="Inputs (one .npz file or a directory of them) to compare on instead: "
                   "ONNX Runtime's defaults, int8 by hand and tessera's plan under "
                   "--accuracy, each with its accuracy on the validation half.")
@click.option("--accuracy", metavar="SPEC",
              help="With --samples: the accuracy budget against the consensus fp32 answers, "
                   "e.g. "
                   "cosine>=0.999,top1>=0.99.")
@option_option("max-candidate-size=2")
@shape_option()
@shape_profile_option()
@click.pass_context
def bench_command(ctx: click.Context, model: str, targets: str, executor: str | None,
                  seconds: float,
                  json_out: str | None, save_to: str | None, samples: str | None,
                  accuracy: str | None, options: tuple[str, ...],
                  shapes: tuple[str, ...], profile: tuple[str, ...]) -> None:
    """Compare, in one run: each backend natively, tessera on each backend alone, tessera's
    greedy plan and tessera's Collage plan. Each row is timed in its own block (a model with
    symbolic dimensions at its shape profile's heaviest point). With --samples: what you
    get without tessera (ONNX Runtime's defaults), the best by hand and tessera's plan
    within the --accuracy budget."""
    import json

    from tessera.ir import Samples, load_model
    from tessera.runtime._compare import BudgetComparison, compare, compare_within

    if accuracy is not None and samples is None:
        from tessera.errors import ConfigError

        raise ConfigError("--accuracy needs --samples: the budget is measured on them")
    config = build_config(targets, (*profile_flags(profile), *options), ctx.args, executor,
                          accuracy=accuracy)
    loaded = load_model(model, parse_shapes(shapes), require_static=False)
    checked = Samples.load(samples, loaded) if samples else None
    bar, update = progress_display()
    with bar:
        result: BudgetComparison | Any = compare(
            loaded, config, seconds=seconds, progress=update) if checked is None else \
            compare_within(loaded, config, checked, seconds=seconds, progress=update)
    rows = result.rows
    show = console()
    if result.best is not None:
        plan = result.best.plan
        show.print(placement_table(plan, loaded, f"tessera's plan: {plan.partitioner}, threads "
                                                 f"{result.best.policy.name}"))
        print_plan_stats(plan)
        for line in precision_lines(plan.stats):  # what the precision search tried, and why
            click.echo(line)
    label = Path(model).name if loaded.is_static else f"{Path(model).name} at {result.point}"
    if isinstance(result, BudgetComparison):
        show.print(budget_table(result, label))
        for line in budget_lines(result):
            click.echo(line)
    else:
        show.print(comparison_table(rows, label))
        for line in precision_notes(rows):
            click.echo(line)
    if save_to:
        if result.best is None:
            from tessera.errors import CompileError

            raise CompileError("tessera's own plan failed to build; nothing to save")
        result.best.save(Path(save_to))
        click.echo(f"saved {save_to} ({Path(save_to).stat().st_size / 1e6:.2f} MB)")
    if json_out:
        from tessera._private.cache import atomic_write_bytes

        atomic_write_bytes(Path(json_out), json.dumps(rows, indent=1).encode())
        click.echo(f"rows written to {json_out}")


def budget_table(result: Any, label: str) -> Table:
    """Three rows: ONNX Runtime's defaults, the best by hand, tessera's plan."""
    from rich.table import Table

    table = Table(title=f"{label}: latency, each row timed in its own block; accuracy on "
                        f"{result.validation} validation sample(s) against the consensus fp32 "
                        "answers",
                  title_justify="left")
    for column in ("row", "median ms", "speed-up vs ORT defaults (higher is faster)",
                   "min cosine", "budget", "what runs"):
        table.add_column(column, justify="left" if column in ("row", "what runs") else "right")
    for title, row in (("without tessera: ONNX Runtime defaults", result.baseline),
                       ("best by hand", result.by_hand), ("tessera", result.tessera)):
        if row is None:
            table.add_row(title, "-", "-", "-", "-", "[red]failed or missed the budget[/red]")
            continue
        cosine = row.get("min_cosine")
        table.add_row(title, f"{row['median_ms']:.3f}", f"{row.get('speedup', 0):.2f}x",
                      f"{cosine:.5f}" if cosine is not None else "-",
                      "met" if row["meets"] else "[red]missed[/red]",
                      row["plan"] if title == "tessera" else row["row"])
    return table


def budget_lines(result: Any) -> list[str]:
    """The comparison in words, and what else was tried by hand."""
    lines = []
    own, hand = result.tessera, result.by_hand
    if own is not None and result.baseline is not None:
        speedup = own.get("speedup", 0.0)
        within = (f"within the accuracy budget {result.budget}" if own["meets"] else
                  f"MISSING the accuracy budget {result.budget}")
        compared = "faster than" if speedup >= 1 else "the speed of"
        lines.append(f"tessera: {speedup:.2f}x {compared} ONNX Runtime defaults, {within} "
                     f"(min cosine {own.get('min_cosine') or 0:.5f})")
        if hand is not None:
            lines.append(f"tessera vs the best by hand ({hand['row']}): "
                         f"{hand['median_ms'] / own['median_ms']:.2f}x (higher: tessera "
                         "faster), found without trying each by hand")
    tried = [f"{r['row']} {r['median_ms']:.3f} ms" + ("" if r["meets"] else " (misses budget)")
             for r in result.rows if "median_ms" in r and r["row"] != "tessera"]
    tried += [f"{r['row']} failed: {r['error']}" for r in result.rows if "error" in r]
    if tried:
        lines.append("also measured: " + "; ".join(tried))
    return lines


def precision_notes(rows: list[dict[str, Any]]) -> list[str]:
    """Native rows that compute below fp32 by default, and how tessera may do the same."""
    lower = [f"{r['row']} computes in {r['precision']}" for r in rows if "precision" in r]
    if not lower:
        return []
    return [f"note: {', '.join(lower)} by default on this CPU; tessera keeps fp32 numerics "
            "unless given samples and an accuracy budget (--samples DIR --accuracy "
            "'cosine>=0.999'), under which it tries bf16 and int8 too"]


def comparison_table(rows: list[dict[str, Any]], label: str) -> Table:
    from rich.table import Table

    table = Table(title=f"{label}: latency, each row timed in its own block",
                  title_justify="left")
    for column in ("row", "median ms", "p90 ms", "min ms",
                   "x best native time (lower is faster)", "plan"):
        table.add_column(column, justify="left" if column in ("row", "plan") else "right")
    for row in rows:
        if "error" in row:
            table.add_row(row["row"], "-", "-", "-", "-", f"[red]{row['error']}[/red]")
            continue
        ratio = row.get("vs_best_native")
        table.add_row(row["row"], f"{row['median_ms']:.3f}", f"{row['p90_ms']:.3f}",
                      f"{row['min_ms']:.3f}", f"{ratio:.2f}x" if ratio else "-",
                      row.get("plan", ""))
    return table
