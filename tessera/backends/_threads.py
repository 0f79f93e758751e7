"""One thread budget across every backend of a plan.

Each backend brings its own pool (ONNX Runtime's, OpenVINO's TBB, torch's OpenMP, IREE's task
system, TVM's). Chained, idle pools that spin steal the cores the next partition needs: ten
default ONNX Runtime sessions in a chain ran about 9x slower here than one session. Alone,
though, ONNX Runtime is 5-10% faster with spinning on. So the policy is chosen per plan:

- "native": a plan of one partition keeps its backend's own fastest settings;
- "shared": a mixed plan gives every backend the whole budget of cores, one at a time, and
  no pool spins once its partition is done (ONNX Runtime's `session.force_spinning_stop`:
  a pool spins during its own run, where spinning pays, and parks when the run returns).

Attributes the user set on a target always win over the policy; a device target's
`-num-cores` caps them all (`_devices.py`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from tessera._private.cores import core_budget
from tessera.backends._devices import core_cap
from tessera.backends._protocol import BACKENDS, PolicyName
from tessera.config import ThreadChoice
from tessera.target import AttrSpec, AttrType, Target


def threads_attr(what: str) -> AttrSpec:
    """The `num-threads` attribute every backend with its own pool declares; 0 leaves the
    count to the plan's thread policy."""
    return AttrSpec("num-threads", AttrType.INT, 0, f"{what} (0: the plan decides)", minimum=0,
                    runtime=True)


@dataclass(frozen=True)
class ThreadPolicy:
    name: PolicyName
    budget: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", PolicyName(self.name))  # read back as text too

    @classmethod
    def for_partitions(cls, count: int, override: ThreadChoice = ThreadChoice.AUTO
                       ) -> ThreadPolicy:
        override = ThreadChoice(override)
        if override is ThreadChoice.AUTO:
            override = ThreadChoice.NATIVE if count <= 1 else ThreadChoice.SHARED
        name = PolicyName.NATIVE if override is ThreadChoice.NATIVE else PolicyName.SHARED
        return cls(name, core_budget())

    def apply(self, target: Target, device: Target | None = None) -> Target:
        """`target` with the settings this policy decides, where the user left them open
        (what its backend's `thread_settings` hook asks for), then specialised for the
        partition's `device` target: its `-num-cores` caps the budget and the threads, and
        its code-generation attributes reach the backend (`Backend.for_device`)."""
        backend = BACKENDS.find(target.kind.name)
        if backend is None:  # a device target: no pool of its own
            return target
        cores = core_cap(device)
        budget = self.budget if cores is None else min(self.budget, cores)
        shaped = backend.with_thread_settings(target, self.name, budget)
        return backend.for_device(shaped, device)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "budget": self.budget}


def prepare_environment(target_count: int) -> dict[str, str]:
    """Before the backend libraries load: OpenMP pools (torch's) sleep at once when idle if
    the plan will mix backends. Set only what the user has not set; returns what was set."""
    if target_count <= 1 or "torch" in sys.modules:
        return {}
    chosen = {"OMP_WAIT_POLICY": "PASSIVE"}
    applied = {k: v for k, v in chosen.items() if k not in os.environ}
    os.environ.update(applied)
    return applied


__all__ = ["PolicyName", "ThreadPolicy", "core_budget", "prepare_environment", "threads_attr"]
