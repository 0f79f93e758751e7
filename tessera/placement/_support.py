"""Which targets may run each node: every configured backend's answer with its reason, the
guard's bans, pins, and the reference fallback. Both partitioners start from this table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessera import backends
from tessera.backends import Support
from tessera.config import CompilationConfig
from tessera.errors import BackendUnavailableError, PartitionError
from tessera.ir import Model
from tessera.target import Target

FALLBACK = Target("reference")
Banned = Mapping[str, Mapping[str, str]]  # node name -> target string -> why it is excluded


def candidate_targets(config: CompilationConfig) -> list[Target]:
    """Backend targets in priority order, each available here."""
    chosen = []
    for target in config.priority:
        availability = backends.get(target.kind.name).is_available()
        if not availability.ok:
            raise BackendUnavailableError(f"{target.kind.name}: {availability.reason}")
        chosen.append(target)
    return chosen


@dataclass(frozen=True)
class SupportTable:
    targets: tuple[Target, ...]  # the configured targets, priority order (fallback last)
    allowed: tuple[tuple[Target, ...], ...]  # per node (topological), priority order
    reasons: dict[str, dict[str, str]]  # node name -> target string -> reason
    pinned: dict[int, Target]

    @classmethod
    def build(cls, model: Model, config: CompilationConfig, banned: Banned | None = None,
              pins: Mapping[int, Target] | None = None) -> SupportTable:
        flow = model.dataflow
        types, constants = flow.value_types, flow.constants
        targets = candidate_targets(config)
        fallback = config.options.fallback
        pins = dict(pins or {})
        everyone = list(dict.fromkeys([*targets, *pins.values()]))
        if fallback and FALLBACK not in everyone:
            everyone.append(FALLBACK)
        answers: dict[tuple[int, str], tuple[bool, str]] = {}
        whole: dict[str, list[Support]] = {}  # a configured target's answers, every node

        def ask(i: int, target: Target) -> tuple[bool, str]:
            key = (i, target.tuning_key())
            if key not in answers:
                backend = backends.get(target.kind.name)
                if not backend.dynamic_shapes and not model.is_static:
                    answers[key] = (False, _static_only(target, model.symbols))
                    return answers[key]
                if target in targets:  # asked about (nearly) every node: in one call
                    if key[1] not in whole:
                        whole[key[1]] = backend.supports_model(model, target)
                    support = whole[key[1]][i]
                else:
                    support = backend.supports(
                        flow.nodes[i], model.opset, types, constants, target=target)
                answers[key] = (support.ok, support.reason)
            return answers[key]

        allowed: list[tuple[Target, ...]] = []
        reasons: dict[str, dict[str, str]] = {}
        unplaced: list[int] = []
        for i, name in enumerate(flow.names):
            excluded = (banned or {}).get(name, {})
            why: dict[str, str] = {}
            ok: list[Target] = []
            for target in ([pins[i]] if i in pins else everyone):
                if str(target) in excluded:
                    why[str(target)] = excluded[str(target)]
                    continue
                good, reason = ask(i, target)
                why[str(target)] = reason
                if good:
                    ok.append(target)
            reasons[name] = why
            allowed.append(tuple(ok))
            if not ok:
                unplaced.append(i)
        if unplaced:
            raise _unplaced_error(flow.names, [flow.nodes[i].op_type for i in unplaced],
                                  [flow.names[i] for i in unplaced], reasons, fallback, pins)
        return cls(tuple(everyone), tuple(allowed), reasons, pins)


def _static_only(target: Target, symbols: tuple[str, ...]) -> str:
    return (f"{target.kind.name} compiles for static shapes, and the model's dimensions "
            f"{', '.join(symbols)} are symbolic: pin them (--input-shape) to use it")


def _unplaced_error(names: list[str], ops: list[str], unplaced: list[str],
                    reasons: Mapping[str, Mapping[str, str]], fallback: bool,
                    pins: Mapping[int, Target]) -> PartitionError:
    lines = [f"  {n} ({op}){' [pinned]' if names.index(n) in pins else ''}: "
             + "; ".join(f"{t}: {r}" for t, r in reasons[n].items())
             for n, op in zip(unplaced[:20], ops[:20], strict=True)]
    more = f"\n  ... and {len(unplaced) - 20} more" if len(unplaced) > 20 else ""
    hint = "" if fallback else " (fallback is off; turn it on to run them on 'reference')"
    return PartitionError(f"{len(unplaced)} node(s) have no backend{hint}:\n"
                          + "\n".join(lines) + more)
