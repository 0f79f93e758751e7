"""TEST-ONLY backend that records what is current while it compiles: `Target.current()` and
`Target.current_device()`. It claims every node and runs like the reference. In the
measuring worker (TESSERA_PLUGINS=tests.backends.scope_spy) it refuses to compile instead,
with what it saw as the reason, so that the worker's answer carries it back."""

from __future__ import annotations

import os
from typing import Any

from tessera import backends
from tessera.backends import Backend, Compiled, Support
from tessera.backends._threads import threads_attr
from tessera.errors import CompileError
from tessera.target import KINDS, Target, register_kind

NAME = "test-scope-spy"
IN_WORKER = __name__ in os.environ.get("TESSERA_PLUGINS", "")


class ScopeSpy(Backend):
    def __init__(self) -> None:
        self.seen: list[tuple[Target | None, Target | None]] = []

    def supports(self, node, opset, types=None, constants=None,  # type: ignore[no-untyped-def]
                 *, target=None):
        return Support(True, "test-only spy claims everything")

    def _compile(self, submodel: Any, target: Target) -> Compiled:
        current, device = Target.current(), Target.current_device()
        if IN_WORKER:
            raise CompileError(f"current={current}; device={device}")
        self.seen.append((current, device))
        reference = backends.get("reference").compile(submodel)

        class Run(Compiled):
            def _run(self, feeds):  # type: ignore[no-untyped-def]
                return reference.run(feeds)

        return Run(self.name, submodel, target)


def register() -> ScopeSpy:
    spy = ScopeSpy()
    spy.kind = register_kind(NAME, serves=("cpu",), doc="test-only scope spy",
                             attrs=(threads_attr("test threads"),))
    backends.BACKENDS.register(NAME, spy)
    return spy


def unregister() -> None:
    backends.BACKENDS.unregister(NAME)
    KINDS.unregister(NAME)


if IN_WORKER:
    register()
