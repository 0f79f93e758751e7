"""TEST-ONLY backends that really crash or really hang, for the measurement-isolation tests.
Each claims every node and runs like the reference, except on a submodel holding a Softmax:
there `test-segfault` dereferences a null pointer (SIGSEGV) and `test-hang` sleeps for an
hour. They are registered only by tests, and in the measuring worker through
TESSERA_PLUGINS=tests.reliability.faulty_backends."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from tessera import backends
from tessera.backends import Backend, Compiled, Support
from tessera.target import register_kind
from tessera.target._kind import KINDS

NAMES = ("test-segfault", "test-hang")


class FaultyBackend(Backend):
    def __init__(self, fault: str) -> None:
        self.fault = fault

    def supports(self, node, opset, types=None, constants=None,  # type: ignore[no-untyped-def]
                 *, target=None):
        return Support(True, f"test-only {self.fault} backend claims everything")

    def _compile(self, submodel: Any, target: Any) -> Compiled:
        reference = backends.get("reference").compile(submodel)
        faulty = any(n.op_type == "Softmax" for n in submodel.graph.node)
        fault = self.fault

        class Run(Compiled):
            def _run(self, feeds):  # type: ignore[no-untyped-def]
                if faulty and fault == "segfault":
                    ctypes.string_at(0)  # a real SIGSEGV
                if faulty and fault == "hang":
                    time.sleep(3600)
                return reference.run(feeds)

        return Run(self.name, submodel, target)


def register() -> None:
    for name in NAMES:
        if name not in backends.names():
            kind = register_kind(name, serves=("cpu",), doc="test-only faulty backend")
            backend = FaultyBackend(name.removeprefix("test-"))
            backend.kind = kind
            backends.BACKENDS.register(name, backend)


def unregister() -> None:
    for name in NAMES:
        if name in backends.names():
            backends.BACKENDS.unregister(name)
            KINDS.unregister(name)


if __name__ in os.environ.get("TESSERA_PLUGINS", ""):  # in the measuring worker
    register()
