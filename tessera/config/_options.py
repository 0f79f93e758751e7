"""Flow options: deployment and compilation switches that are not Target attributes.

Each option declares whether it enters the compile cache key. None of them ever enters a
target's tuning key, so changing one never invalidates measured costs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from tessera._private.registry import Registry, did_you_mean
from tessera._private.values import parse_bool, parse_float, parse_int
from tessera.config._accuracy import AccuracyBudget
from tessera.config._shapes import ShapeProfile
from tessera.errors import ConfigError

__all__ = ["EXECUTORS", "EXECUTOR_CLASSES", "MEASURE_TIMEOUT_S", "RUNTIMES",
           "RUNTIME_CLASSES", "FineSearch", "FlowOptions", "Implementation", "MeasureOn",
           "ObjectiveName", "OptionInfo", "Partitioner", "ThreadChoice", "option_infos"]


@dataclass(frozen=True)
class Implementation:
    """An executor or runtime a config may name, and what it does. Its code lives in a
    higher layer, which registers it under the same name in `classes` when imported
    (`tessera.runtime` registers its own): config validates names without importing it."""

    name: str
    doc: str
    classes: Registry[Any] = field(repr=False, compare=False)

    def load(self) -> Any:
        """The registered code: a class the runtime calls."""
        return self.classes.get(self.name)


# The executor chains a plan's compiled partitions; the runtime is the compiled model that
# holds them and answers `run`. Each config (each named executor of one) names one of each.
# The graph executor runs a fixed order computed ahead of time and accepts every shape the
# profile allows, so it also answers to `aot` and `vm`; the one runtime drives partitions
# that run in each backend's native C/C++ library, so it also answers to `c` and `c++`.
EXECUTOR_CLASSES: Registry[Any] = Registry("executor implementation", ConfigError)
RUNTIME_CLASSES: Registry[Any] = Registry("runtime implementation", ConfigError)
EXECUTORS: Registry[Implementation] = Registry("executor", ConfigError)
EXECUTORS.register("graph", Implementation(
    "graph", "chains the partitions in topological order in one process", EXECUTOR_CLASSES),
    aliases=("aot", "vm"))

RUNTIMES: Registry[Implementation] = Registry("runtime", ConfigError)
RUNTIMES.register("python", Implementation(
    "python", "in-process runtime handing numpy arrays between partitions", RUNTIME_CLASSES),
    aliases=("c", "c++"))

MEASURE_TIMEOUT_S = 120.0  # one candidate's compile and runs, before it counts as hung


# The choices of flow options, each an enum whose members are their names in config strings
class Partitioner(StrEnum):
    """How placement decides: greedy by priority, or Collage's measured search."""

    AUTO = "auto"  # collage with more than one backend, else greedy
    GREEDY = "greedy"
    COLLAGE = "collage"


class ObjectiveName(StrEnum):
    """What the end-to-end race keeps: the lowest latency, or the most inferences per
    second (`Objective`)."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"


class ThreadChoice(StrEnum):
    """Each backend's own pool settings for a plan of one partition, or one shared budget
    of cores for a mixed plan (auto: whichever suits the plan)."""

    AUTO = "auto"
    NATIVE = "native"
    SHARED = "shared"


class MeasureOn(StrEnum):
    """Where candidates are measured: this machine, or the nodes of a Ray cluster."""

    LOCAL = "local"
    RAY = "ray"


class FineSearch(StrEnum):
    """Where Collage measures candidates of a few nodes: everywhere on a small model and,
    on a large one, only in the regions where a mix of targets could win (auto); or
    everywhere on every model."""

    AUTO = "auto"
    EVERYWHERE = "everywhere"


_E = TypeVar("_E", bound=StrEnum)


def _choice(choices: type[_E]) -> Callable[[object], _E]:
    """The parser of an option whose value is one of `choices` (case and spaces aside)."""
    names = [c.value for c in choices]

    def parse(value: object) -> _E:
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in names:
            raise ValueError(f"{value!r} is not one of {', '.join(names)}"
                             + did_you_mean(str(value), names))
        return choices(text)

    return parse


@dataclass(frozen=True)
class OptionInfo:
    name: str
    doc: str
    cache_key: bool
    parse: Callable[[object], Any]


def _option(default: Any, doc: str, *, cache_key: bool, parse: Callable[[object], Any]) -> Any:
    return field(default=default, metadata={"doc": doc, "cache_key": cache_key, "parse": parse})






def _text_or_none(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    return value.strip()


def _positive_int(value: object) -> int:
    number = parse_int(value)
    if number < 1:
        raise ValueError(f"expected an integer >= 1, got {number}")
    return number


def _positive_int_or_none(value: object) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return _positive_int(value)


def _positive_seconds(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise ValueError(f"expected a number of seconds > 0, got {value!r}")
    return number



def _precision_time(value: object) -> float | str:
    """'auto', 'unlimited', or seconds > 0."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text in ("auto", "unlimited"):
        return str(text)
    try:
        return _positive_seconds(text)
    except ValueError:
        raise ValueError(f"expected auto, unlimited or a number of seconds > 0, got "
                         f"{value!r}") from None


def _percentile(value: object) -> float:
    """50, 90, 99.9 or 'p99': a percentile in (0, 100]; a whole number comes back as int."""
    text = value.strip().lower().removeprefix("p") if isinstance(value, str) else value
    try:
        number = parse_float(text)
    except ValueError:
        number = float("nan")
    if not 0 < number <= 100:
        raise ValueError(f"expected a percentile in (0, 100] such as 50 (the median), 90, 99 "
                         f"or p99, got {value!r}")
    return int(number) if number.is_integer() else number


def _latency_budget(value: object) -> float | None:
    """Milliseconds: 5, 2.5 or '2.5ms'; None, '' or 'none' for no budget."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    text = value.strip().lower().removesuffix("ms").strip() if isinstance(value, str) else value
    try:
        number = parse_float(text)
    except ValueError:
        number = float("nan")
    if not number > 0:
        raise ValueError(f"expected milliseconds > 0 such as 5, 2.5 or 2.5ms (or none), got "
                         f"{value!r}")
    return number


def _accuracy(value: object) -> AccuracyBudget | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return AccuracyBudget.parse(value)  # a ConfigError is a ValueError: create names the option


def _shapes(value: object) -> ShapeProfile | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    profile = ShapeProfile.parse(value)  # a ConfigError is a ValueError: create names it
    return profile if profile.dims else None


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, AccuracyBudget | ShapeProfile) else value


@dataclass(frozen=True)
class FlowOptions:
    partitioner: Partitioner = _option(
        Partitioner.AUTO,
        "greedy, collage, or auto (collage when more than one backend is configured)",
        cache_key=True, parse=_choice(Partitioner))
    fallback: bool = _option(
        True, "place what no backend claims on the device's reference fallback",
        cache_key=True, parse=parse_bool)
    min_block_size: int = _option(
        1, "smallest number of nodes greedy placement gives a backend",
        cache_key=True, parse=_positive_int)
    max_candidate_size: int = _option(
        3, "collage: largest connected node set grown as a candidate (each target's maximal "
        "regions and whole-model plans are candidates whatever this is)",
        cache_key=True, parse=_positive_int)
    fine_search: FineSearch = _option(
        FineSearch.AUTO,
        "collage: where candidates of a few nodes are measured: auto (everywhere on a "
        "model of up to 80 nodes; on a larger one, whole regions of about 40 nodes are "
        "measured first, and only regions where a mix of targets could win are searched "
        "node by node) or everywhere (the exact search of the cost model over every "
        "candidate; slow on large models)", cache_key=True, parse=_choice(FineSearch))
    foreign_costs: bool = _option(
        False, "collage: use cost records measured on another machine fingerprint when this "
        "machine has none", cache_key=True, parse=parse_bool)
    numeric_guard: bool = _option(
        True, "judge each partition on random inputs against the consensus of independent "
        "implementations (docs/trust.md); a backend that fails gives its partition back, one "
        "the consensus is against gives back the smallest subgraph that disagrees, and "
        "placement is redone",
        cache_key=True, parse=parse_bool)
    threads: ThreadChoice = _option(
        ThreadChoice.AUTO,
        "thread policy: native (each backend's own fastest pool settings), shared (one "
        "budget of cores, no spinning pools), or auto (native for a one-partition plan, shared "
        "for a mixed one)", cache_key=True, parse=_choice(ThreadChoice))
    accuracy: AccuracyBudget | None = _option(
        None, "budget the plan's outputs keep against the consensus fp32 answers: "
        "max-abs<=X, max-rel<=X, cosine>=X, top1>=X (argmax agreement along the last axis), "
        "joined by commas, e.g. cosine>=0.999,top1>=0.99, or exact (fp32 only). Unset: the "
        "float forms the CPU computes natively (bf16, f16) are searched under "
        "cosine>=0.9995; int8 is tried only with a budget and the user's samples. Without "
        "samples, inputs are generated in the ranges the model implies",
        cache_key=True, parse=_accuracy)
    calibration_samples: int | None = _option(
        None, "how many samples of the calibration half (the samples at even positions) "
        "calibrate int8 forms: the first N of them (unset: all); the validation half judges "
        "the plan whatever this is", cache_key=True, parse=_positive_int_or_none)
    precision_time: float | str = _option(
        "auto", "seconds the precision search may take after the fp32 plan, its variants "
        "tried in order of their expected payoff (the static int8 forms first) and no new "
        "one started once they are spent or the race of the forms found would overrun "
        "them (the first, and the first quantized one after a float one, always start): "
        "auto (as long as the compile took to reach the "
        "fp32 plan, so a compile with samples takes about twice a float one), unlimited, "
        "or a number", cache_key=True, parse=_precision_time)
    shapes: ShapeProfile | None = _option(
        None, "the sizes of the model's symbolic dimensions placement measures at, and the "
        "ranges run accepts: NAME=V1,V2 (representative values, each measured; V@W weighs "
        "one), NAME=MIN:OPT:MAX (measured at OPT) or NAME=A+B (the sum of other dimensions, "
        "optionally plus a number, computed at every point and required of run's inputs), "
        "joined by ';', e.g. batch=1,4;sequence=1:128:512, or for a decoder with a "
        "key/value cache sequence=1:1:64;past_sequence=0:16:63;"
        "total_sequence=past_sequence+sequence; 0 may start a range or be listed (the model "
        "is checked there, never measured); without it, each symbolic dimension is measured "
        "at 1 (128 for a sequence-like name)", cache_key=True, parse=_shapes)
    objective: ObjectiveName = _option(
        ObjectiveName.LATENCY,
        "what the end-to-end race of rival plans keeps: latency (the plan with the "
        "lowest latency-percentile of per-call latencies) or throughput (the plan with the "
        "most inferences per second from `concurrency` callers at once, within "
        "latency-budget when given)", cache_key=True, parse=_choice(ObjectiveName))
    latency_percentile: float = _option(
        50, "the percentile of per-call latencies the race compares, in (0, 100]: 50 is the "
        "median, 90 or 99 the tail; with objective=throughput, the one latency-budget limits",
        cache_key=True, parse=_percentile)
    concurrency: int = _option(
        1, "callers running the model at once while the race times it: throughput is "
        "measured, and latency per call is taken, with this many threads calling run",
        cache_key=True, parse=_positive_int)
    latency_budget: float | None = _option(
        None, "objective=throughput: milliseconds a call may take (at latency-percentile, "
        "with `concurrency` callers); a plan slower than that is not kept",
        cache_key=True, parse=_latency_budget)
    isolate: bool = _option(
        True, "collage: measure candidates in a reused worker process, so a backend that "
        "crashes or hangs on one only invalidates that candidate", cache_key=False,
        parse=parse_bool)
    measure_timeout: float = _option(
        MEASURE_TIMEOUT_S, "collage: seconds one candidate may take (compile and runs) before "
        "it is marked invalid as hung", cache_key=False, parse=_positive_seconds)
    measure: MeasureOn = _option(
        MeasureOn.LOCAL,
        "collage: where candidates are measured: local (this machine; in a worker "
        "process with isolate, else in this process) or ray (on the nodes of a Ray cluster, "
        "see ray-address and measure-on; needs the tessera[ray] extra)",
        cache_key=True, parse=_choice(MeasureOn))
    ray_address: str | None = _option(
        None, "measure=ray: the address of the Ray cluster's head node (host:port, or "
        "ray://host:port for a Ray client); none starts a Ray instance on this machine",
        cache_key=False, parse=_text_or_none)
    measure_on: str | None = _option(
        None, "measure=ray: the Ray nodes candidates are measured on: a node label KEY=VALUE "
        "(ray start --labels, or a custom resource named KEY=VALUE), or a machine "
        "fingerprint as the nodes report it (TESSERA_MACHINE, else CPU model and cores); "
        "none measures on every node", cache_key=True, parse=_text_or_none)
    compile_cache: bool = _option(
        True, "keep each compiled partition in a form its backend reloads fast (OpenVINO IR, "
        "an ONNX file), under the cache directory: a later compile of the same model skips "
        "the slow steps. Size: TESSERA_COMPILE_CACHE_MB (default 4096)",
        cache_key=False, parse=parse_bool)
    link_params: bool = _option(
        True, "store weights inside saved artifacts; false writes them beside the artifact "
        "(model.tess.weights, memory-mapped on load), keeping the artifact small",
        cache_key=False, parse=parse_bool)
    verify: bool = _option(
        False, "debug mode: run the IR verifier after each graph cleanup pass and the plan "
        "verifier after each placement step; a broken invariant is an error naming it",
        cache_key=False, parse=parse_bool)

    @classmethod
    def create(cls, values: Mapping[str, object], base: FlowOptions | None = None) -> FlowOptions:
        infos = {info.name: info for info in option_infos()}
        changes: dict[str, Any] = {}
        for raw_name, value in values.items():
            name = raw_name.replace("-", "_")
            info = infos.get(name)
            if info is None:
                valid = sorted(n.replace("_", "-") for n in infos)
                raise ConfigError(
                    f"unknown option {raw_name!r}"
                    f"{did_you_mean(name.replace('_', '-'), valid)} (valid: {', '.join(valid)})"
                )
            try:
                changes[name] = info.parse(value)
            except ValueError as err:
                raise ConfigError(f"bad value for option {raw_name!r}: {err}") from None
        options = dataclasses.replace(base or cls(), **changes)
        if options.latency_budget is not None and options.objective is not ObjectiveName.THROUGHPUT:
            raise ConfigError(
                f"option 'latency-budget' ({options.latency_budget:g} ms) limits the plan "
                f"kept for throughput, but objective is {options.objective!r}: set "
                "objective=throughput, or leave latency-budget unset")
        _check_measure(options)
        return options

    def to_dict(self) -> dict[str, Any]:
        return {name.replace("_", "-"): _plain(value) for name, value in vars(self).items()}

    def cache_key_items(self) -> dict[str, Any]:
        return {
            f.name: _plain(vars(self)[f.name])
            for f in dataclasses.fields(self)
            if f.metadata["cache_key"]
        }


def _check_measure(options: FlowOptions) -> None:
    if options.measure is not MeasureOn.RAY:
        given = [name for name, value in (("ray-address", options.ray_address),
                                          ("measure-on", options.measure_on)) if value]
        if given:
            raise ConfigError(f"option {given[0]!r} applies to measuring on a Ray cluster, but "
                              f"measure is {options.measure!r}: set measure=ray as well")
        return
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a ray module left half-imported, or blocked
        found = False
    if not found:
        raise ConfigError("option measure=ray needs Ray, which is not installed here: "
                          "pip install 'tessera[ray]'")


def option_infos() -> list[OptionInfo]:
    return [
        OptionInfo(f.name, f.metadata["doc"], f.metadata["cache_key"], f.metadata["parse"])
        for f in dataclasses.fields(FlowOptions)
    ]
