"""Runtime-settings choices of whole-model plans in the end-to-end race. A backend's default
settings suit one caller waiting on one inference; other settings may suit the objective
better (ONNX Runtime's parallel execution mode for a branchy model; with several callers at
once, pools of each caller's share of the cores, or OpenVINO's throughput streams). So each
plan of one partition on one backend enters the race with a few choices of its target's settings, as
its backend's `setting_choices` proposes them, named `only <chosen target>`.

A choice sets only its backend's `setting_attrs`, and only where the user left all of them
open, so that the target it came from is always the choice less those attributes
(`settings_base`): a choice the numeric guard gives back bans that target as well. An int8
target's choices share its int8 form (the quantizer's memo and the compile cache hold it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tessera.backends import BACKENDS
from tessera.config import Objective
from tessera.placement.record._plan import Plan
from tessera.placement.record._rival import Rival
from tessera.placement.search._support import FALLBACK
from tessera.target import Target

MAX_CHOICES = 3  # per target: each is one more build and timing block


def setting_choices(target: Target, objective: Objective) -> list[Target]:
    """The settings choices of `target` worth racing under `objective` (none where the user set any
    of the attributes they would change)."""
    backend = BACKENDS.find(target.kind.name)
    if backend is None or not backend.setting_attrs:
        return []
    explicit = target.explicit_attrs
    if any(name in explicit for name in backend.setting_attrs):
        return []
    found: list[Target] = []
    for choice in backend.setting_choices(target, objective.name, objective.concurrency):
        changed = [k for k in choice.attrs if choice.attrs[k] != target.attrs.get(k)]
        if choice.kind != target.kind or choice == target or choice in found or any(
                k not in backend.setting_attrs for k in changed):
            continue  # not a settings choice of this target
        found.append(choice)
    return found[:MAX_CHOICES]


def settings_base(target: Target) -> Target:
    """The target a settings choice was made from: `target` with its backend's
    `setting_attrs` back at their defaults (itself when none is set)."""
    backend = BACKENDS.find(target.kind.name)
    varied = [n for n in (backend.setting_attrs if backend is not None else ())
              if n in target.explicit_attrs]
    if not varied:
        return target
    return target.with_attrs(**{n: target.kind.schema[n].default for n in varied})


def with_setting_choices(rivals: Mapping[Rival, Plan], objective: Objective
                          ) -> dict[Rival, Plan]:
    """`rivals`, then the settings choices of each plan among them that is one partition on
    one backend (the model whole), each target's once."""
    raced = dict(rivals)
    done: list[Target] = []
    for plan in rivals.values():
        if len(plan.partitions) != 1:
            continue
        part = plan.partitions[0]
        if part.kind == FALLBACK.kind.name or part.target in done:
            continue
        done.append(part.target)
        for choice in setting_choices(part.target, objective):
            rival = Rival.single(choice)
            if rival not in raced:
                raced[rival] = replace(plan, partitions=(replace(part, target=choice),))
    return raced


__all__ = ["MAX_CHOICES", "setting_choices", "settings_base", "with_setting_choices"]
