"""What several commands share: the options every command spells the same way, the parsers of
their NAME=VALUE arguments, and the placement table and end-to-end line they print."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tessera.config import CompilationConfig, split_target_option
from tessera.errors import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

    from tessera.config import AccuracyBudget
    from tessera.ir import Model
    from tessera.placement import Plan, SearchStats
    from tessera.placement.record import Rival, Timing

F = TypeVar("F", bound=Callable[..., Any])


# Commands that build a config also take tvmc-style --target-<kind>-<attr>=VALUE flags.
TARGET_FLAGS = {"ignore_unknown_options": True, "allow_extra_args": True}
TARGET_FLAGS_HELP = ("\b\nTarget attributes, tvmc-style: --target-<kind>-<attr>=VALUE,\n"
                     "e.g. --target-onnxruntime-num-threads=2 (repeatable).")


# The options below are spelled the same in every command that has them; `-o` is kept for
# --output and `-O` for --option everywhere.
def target_option(*, required: bool = True, note: str = "") -> Callable[[F], F]:
    return click.option("-t", "--target", "targets", required=required, metavar="TARGETS",
                        help='Targets in priority order, e.g. "openvino,onnxruntime,cpu"; '
                             '"all" is every available CPU backend; or a config .json file'
                             f"{note}.")


def executor_option() -> Callable[[F], F]:
    return click.option("--executor", metavar="NAME",
                        help="Of a config with named executors, the one to use (may be left "
                             "out when it has one); of a plain target list, the executor "
                             "kind (default graph).")


def option_option(example: str) -> Callable[[F], F]:
    return click.option("-O", "--option", "options", multiple=True, metavar="NAME=VALUE",
                        help=f"Flow option, e.g. -O {example} (repeatable; see `tessera "
                             "config show`).")


def pin_option() -> Callable[[F], F]:
    return click.option("--pin", "pins", multiple=True, metavar="NODE=TARGET",
                        help="Pin nodes to a target (repeatable). NODE is an exact node name, "
                             "a regular expression over node names (full match), or "
                             "'re:<regex>'; the first '=' ends it.")


def shape_option() -> Callable[[F], F]:
    return click.option("--input-shape", "shapes", multiple=True, metavar="NAME=D1,D2,...",
                        help="Fix the shape of an input with symbolic dimensions, e.g. "
                             "x=1,3,224,224 (repeatable).")


def shape_profile_option() -> Callable[[F], F]:
    return click.option("--shape-profile", "profile", multiple=True, metavar="NAME=VALUES",
                        help="Sizes of a symbolic dimension to place at: representative "
                             "values (batch=1,4; weighted: sequence=32@1,128@3), a range "
                             "min:opt:max that run accepts (sequence=1:128:512), measured "
                             "at opt, or the sum of other dimensions: "
                             "total_sequence=past_sequence+sequence (repeatable, one "
                             "dimension each).")


def profile_flags(items: tuple[str, ...]) -> tuple[str, ...]:
    """--shape-profile items as the -O shapes=... item (an -O given later wins)."""
    for item in items:
        name, has_value, values = item.partition("=")
        if not has_value or not name.strip() or not values.strip():
            raise ConfigError(f"--shape-profile expects NAME=VALUES (sequence=1:128:512 or "
                              f"batch=1,4), got {item!r}")
    return (f"shapes={';'.join(items)}",) if items else ()


def samples_option() -> Callable[[F], F]:
    return click.option("--samples", type=click.Path(exists=True), metavar="PATH",
                        help="Your own inputs: one .npz file (one sample) or a directory of "
                             ".npz files; the plan's accuracy against the consensus fp32 answers "
                             "is measured on the validation half (every second sample).")


def objective_options() -> Callable[[F], F]:
    """--objective and --concurrency: what the end-to-end race of rival plans keeps."""
    objective = click.option(
        "--objective", type=click.Choice(["latency", "throughput"]),
        help="What the race of rival plans keeps: the lowest latency (default; at the "
             "latency-percentile option's percentile) or the most inferences per second "
             "(within the latency-budget option's milliseconds, when set).")
    concurrency = click.option(
        "--concurrency", type=int, metavar="N",
        help="Callers running the model at once while the race times it (default 1).")

    def decorate(command: F) -> F:
        return objective(concurrency(command))

    return decorate


def objective_flags(objective: str | None, concurrency: int | None) -> tuple[str, ...]:
    """--objective and --concurrency as -O NAME=VALUE items (an -O given later wins)."""
    return tuple(f"{name}={value}" for name, value in (("objective", objective),
                                                        ("concurrency", concurrency))
                 if value is not None)


def measure_options() -> Callable[[F], F]:
    """--measure, --ray-address and --measure-on: where Collage measures its candidates."""
    measure = click.option(
        "--measure", type=click.Choice(["local", "ray"]),
        help="Where candidates are measured: on this machine (default) or on the nodes of a "
             "Ray cluster (needs tessera[ray]; see docs/distributed.md).")
    address = click.option(
        "--ray-address", metavar="ADDRESS",
        help="With --measure ray: the cluster's head node, e.g. 10.0.0.5:6379 (default: "
             "RAY_ADDRESS, else a Ray instance on this machine).")
    on = click.option(
        "--measure-on", metavar="LABEL",
        help="With --measure ray: the nodes to measure on, by label KEY=VALUE (ray start "
             "--labels) or machine fingerprint, e.g. tessera.machine=c6i (default: every "
             "node).")

    def decorate(command: F) -> F:
        return measure(address(on(command)))

    return decorate


def measure_flags(measure: str | None, address: str | None, on: str | None
                  ) -> tuple[str, ...]:
    """--measure, --ray-address and --measure-on as -O items (an -O given later wins)."""
    return tuple(f"{name}={value}" for name, value in (
        ("measure", measure), ("ray-address", address), ("measure-on", on))
        if value is not None)


def accuracy_line(stats: SearchStats, budget: AccuracyBudget | None) -> str:
    """The plan's accuracy on the samples and whether it meets the budget, or why none."""
    report = stats.accuracy
    if report is None:
        if budget is not None and budget.exact:
            return "accuracy: exact (fp32 only, no lower precision searched)"
        told = f" (budget {budget} not checked)" if budget is not None else ""
        return f"accuracy: not measured{told}"
    return str(report.summary())


def precision_lines(stats: SearchStats) -> list[str]:
    """What the precision search tried, per variant, and which plan it kept."""
    record = stats.precision
    if record is None:
        return []
    if not record.searched:
        return [f"precision: {record.status}"]
    judged = f"; budget {record.budget} on {record.inputs}" if record.inputs else ""
    lines = [f"precision: searched {len(record.variants)} variant(s) over "
             f"{record.segments} segment(s) in {record.seconds or 0:.1f} s; kept "
             f"{record.kept}{judged}"]
    for v in record.variants:
        whole = "" if v.whole_ms is None else f"whole model {v.whole_ms:.3f} ms, "
        used = "" if v.whole_used is None else f"budget used {v.whole_used:.2f}; "
        outcome = v.note or (f"segments {list(v.kept)} kept in it"
                             + (f", {v.reverted} sent back to fp32" if v.reverted else ""))
        lines.append(f"  {v.target}: {whole}{used}{outcome}")
    return lines


def partition_precision(stats: SearchStats, index: int, target: object) -> str:
    """', int8 (budget share 0.31)' for a partition of a lower precision, else ''."""
    from tessera.target import Target

    precision = Target(str(target)).attrs.get("precision")
    if precision in (None, "fp32", "f32"):
        return ""
    shares = stats.precision.partition_used if stats.precision is not None else ()
    share = shares[index] if index < len(shares) else None
    return f", {precision}" + (f" (budget share {share:.2f})" if share is not None else "")


def shape_lines(stats: SearchStats) -> list[str]:
    """Where a model with symbolic dimensions was measured, and the advice to give a
    profile when the defaults were used."""
    record = stats.shapes
    if record is None:
        return []
    points = "; ".join(f"{p} (weight {w:.2f})" if len(record.points) > 1 else p
                       for p, w in zip(record.points, record.weights, strict=True))
    if not record.defaulted:
        return [f"shapes: measured at the profile's point(s) {points}"]
    return [f"shapes: symbolic dimensions measured at the default point {points} (1 each, "
            f"128 for a sequence-like name): give the sizes you serve with --shape-profile "
            f"(NAME=MIN:OPT:MAX or NAME=V1,V2), so the plan is chosen for them"]


def partition_points(stats: SearchStats, index: int) -> str:
    """' (batch=1: 0.210 ms; batch=8: 1.020 ms)' for a partition measured at several
    points, else ''."""
    record = stats.shapes
    if record is None or index >= len(record.partition_ms) or len(record.points) < 2:
        return ""
    costs = record.partition_ms[index]
    if len(costs) != len(record.points):
        return ""
    return " (" + "; ".join(f"{p}: {c:.3f} ms" for p, c in zip(record.points, costs,
                                                               strict=True)
                            if c is not None) + ")"


def parse_pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    """NAME=VALUE items split at the first '=' (a value such as a target string or a file
    path may hold more); a later item with the same name wins."""
    pairs = {}
    for item in items:
        key, has_value, value = item.partition("=")
        if not has_value or not key:
            raise ConfigError(f"{what} expects NAME=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def parse_shapes(items: tuple[str, ...]) -> dict[str, list[int]] | None:
    shapes = {}
    for name, dims in parse_pairs(items, "--input-shape").items():
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ConfigError(f"--input-shape {name}={dims}: dimensions must be integers, "
                              "e.g. x=1,3,224,224") from None
    return shapes or None


def cli_pins(model: Model, items: tuple[str, ...]) -> dict[str, str] | None:
    """--pin NODE=TARGET: an exact node name, else a regular expression over node names
    ('re:' in front is optional here)."""
    names = set(model.dataflow.names)
    pins = {}
    for key, target in parse_pairs(items, "--pin").items():
        pins[key if key in names or key.startswith("re:") else f"re:{key}"] = target
    return pins or None


def expand_targets(targets: str) -> str:
    """'all' is every available backend that takes part in it, by its rank."""
    if targets.strip() != "all":
        return targets
    from tessera import backends

    return ",".join(backends.for_all()) or "reference"


def config_from_cli(
    targets: str, host: str | None, executor: str | None, runtime: str | None,
    options: tuple[str, ...], extra_args: list[str],
) -> CompilationConfig:
    """Build a config from CLI values, including tvmc-style --target-<kind>-<opt>=v flags."""
    target_options: dict[str, dict[str, str]] = {}
    args = list(extra_args)
    while args:
        flag = args.pop(0)
        if not flag.startswith("--target-"):
            raise ConfigError(f"unexpected argument {flag!r}: flow options go as -O NAME=VALUE, "
                              "target attributes as --target-<kind>-<attr>=VALUE")
        name, has_value, value = flag.partition("=")
        if not has_value:
            if not args:
                raise ConfigError(f"{flag} needs a value, e.g. {flag}=VALUE")
            value = args.pop(0)
        kind, option = split_target_option(name)
        target_options.setdefault(kind, {})[option] = value
    flow: dict[str, str] = {}
    for item in options:
        key, has_value, value = item.partition("=")
        if not has_value:
            raise ConfigError(f"--option expects NAME=VALUE, got {item!r}")
        flow[key.strip()] = value.strip()
    config = CompilationConfig.create(targets, host=host, runtime=runtime,
                                      target_options=target_options, **flow)
    # as in tessera.compile: an executor's name with named executors, else the executor kind
    return config if executor is None else config.executor_config(executor)


def end_to_end_line(stats: SearchStats) -> str | None:
    """How the rival plans timed end to end under the objective (the figure compared), and
    which was kept (None: no race ran)."""
    race = stats.race
    if race is None or not race.timings:
        return None
    objective, served = race.objective, race.throughput_ips
    budget = objective.latency_budget_ms if objective is not None else None

    def timing(rival: Rival, value: Timing) -> str:
        if value.ms is None:
            return f"{rival}: {value}"
        if rival not in served:
            return f"{rival} {value}"
        over = " (over the budget)" if budget is not None and value.ms > budget else ""
        return f"{rival} {served[rival]:.1f}/s at {value}{over}"

    timings = ", ".join(timing(k, v) for k, v in race.timings.items())
    label = f" ({objective})" if objective is not None else ""
    where = f" on {race.raced_on}" if race.raced_on else ""
    return f"end to end{label}{where}: {timings}; kept {race.kept}"


def interrupted_line(stats: SearchStats) -> str | None:
    """Where an interrupt stopped the search and what was kept (None: it finished)."""
    return None if stats.interrupted is None else str(stats.interrupted)


def search_line(stats: SearchStats) -> str | None:
    """What the search measured (None: nothing was searched)."""
    measuring = stats.measuring
    if measuring is None or not measuring.candidates:
        return None
    searched = stats.cover.seconds if stats.cover is not None else None
    coarse = f"; {stats.coarse}" if stats.coarse is not None else ""
    return (f"search: {measuring.candidates} candidates, {measuring.measurements} measured, "
            f"{measuring.cache_hits} from the cost database; measuring "
            f"{measuring.seconds:.2f} s, search {searched or 0.0:.3f} s{coarse}")


def placement_table(plan: Plan, model: Model, title: str) -> Table:
    from rich.table import Table

    ops = dict(zip(model.dataflow.names, (n.op_type for n in model.dataflow.nodes),
                   strict=True))
    table = Table(title=title, title_justify="left")
    # a plan kept for its end-to-end time (a precision variant) has no per-partition costs
    costed = any(part.cost_ms is not None for part in plan.partitions)
    columns = ("#", "target", "nodes", "ops", "in → out") + (("cost ms",) if costed else ())
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "nodes", "cost ms")
                         else "left", overflow="fold")
    for i, part in enumerate(plan.partitions):
        counts = Counter(ops[n] for n in part.nodes)
        summary = ", ".join(f"{op}×{c}" if c > 1 else op for op, c in counts.most_common(6))
        if len(counts) > 6:
            summary += f", +{len(counts) - 6} more"
        edges = f"{len(part.inputs)} → {len(part.outputs)}"
        cost = f"{part.cost_ms:.3f}" if part.cost_ms is not None else "-"
        table.add_row(str(i), str(part.target), str(len(part.nodes)), summary, edges,
                      *((cost,) if costed else ()))
    return table
