"""Reference backend: onnx.reference.ReferenceEvaluator, the fallback that covers every op."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from tessera._private.text import first_line
from tessera.backends import _deviations as dev
from tessera.backends._availability import library_availability
from tessera.backends._protocol import (
    BACKENDS,
    Backend,
    Compiled,
    Constants,
    NativeRunner,
    Support,
    ValueTypes,
)
from tessera.backends._schema import schema_for
from tessera.target import Target, register_kind

if TYPE_CHECKING:
    import numpy as np
    import onnx


KIND = register_kind(
    "reference",
    serves=("cpu",),
    doc="onnx.reference.ReferenceEvaluator: slow, complete, the fallback.",
    availability=library_availability("onnx", ("onnx",), "all"),
)


# Where onnx.reference computes something other than the standard and tessera has no
# correction (`_reference_fixes.py` holds those it has): found by the consensus oracle.
DEVIATIONS: tuple[dev.Deviation, ...] = (
    dev.Deviation(("Scan",), "Scan-8 (with its batch axis) fails to run: its body is "
                  "evaluated as Scan-9's (conformance matrix)", lambda facts: facts.opset < 9),
)


class ReferenceBackend(Backend):
    """Supports exactly the ops `onnx.reference` implements at the node's schema version."""

    kind = KIND
    colour = "#7f7f7f"
    external_weights = True  # fed to the evaluator as views of the model's weights file
    runs_whole_regions = True  # sequences, optionals and maps, as its own runtime does
    device_note = "it runs numpy, whose kernels choose their instructions on the CPU they run on"

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support:
        from onnx.reference import ReferenceEvaluator
        from onnx.reference.ops import load_op

        refusal = dev.first_deviation(DEVIATIONS, "onnx.reference", node, opset, types,
                                      constants)
        if refusal is not None:
            return refusal
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        version = opset
        if not domain:
            schema = schema_for(node, opset)
            if schema is None:
                return Support(False, f"{node.op_type} is not an ONNX op at opset {opset}")
            version = schema.since_version
        try:
            if domain == "ai.onnx.ml":  # the evaluator's own table for that domain
                from onnx.reference.ops.aionnxml import load_op as load_ml_op

                load_ml_op(domain, node.op_type, None)
            else:
                load_op(domain, node.op_type, version, node=node,
                        evaluator_cls=ReferenceEvaluator)
        except Exception as err:  # a lookup failure of any kind means "not implemented here"
            first = first_line(err, 120)
            return Support(False, f"onnx.reference does not implement {node.op_type}: {first}")
        return Support(True, f"onnx.reference implements {node.op_type}")

    native_import = True

    def native_runner(self, model: bytes) -> NativeRunner:
        """onnx.reference as it comes, without tessera's corrections (`_reference_fixes`)."""
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        # a list of the outputs: a dict only where intermediate results are asked for
        return lambda feeds: cast("list[Any]", evaluator.run(None, dict(feeds)))

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        from onnx.reference import ReferenceEvaluator

        from tessera.backends._reference_fast import fast_ops
        from tessera.backends._reference_fixes import default_opset, fixes_for
        from tessera.ir._weights import weights_as_feeds

        evaluated, weights = weights_as_feeds(submodel)  # no copy of the weights
        opset = default_opset(submodel)
        fixes = fixes_for(opset) if opset is not None else []
        return _ReferenceCompiled(self.name, submodel, target,
                                  ReferenceEvaluator(evaluated, new_ops=[*fixes, *fast_ops()]),
                                  weights)


class _ReferenceCompiled(Compiled):
    thread_safe = False  # ReferenceEvaluator keeps per-run state

    def __init__(self, backend: str, model: onnx.ModelProto, target: Target, evaluator: Any,
                 weights: dict[str, np.ndarray] | None = None):
        super().__init__(backend, model, target)
        self.evaluator = evaluator
        self._weights = weights or {}  # the weights the evaluator takes as inputs
        self._names = [o.name for o in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        if self._weights:
            feeds = {**feeds, **self._weights}
        outputs = self.evaluator.run(self._names, feeds)
        # sequences stay lists, maps dicts and empty optionals None, as ONNX Runtime gives them
        values: dict[str, Any] = {
            n: v if v is None or isinstance(v, (list, dict)) else np.asarray(v)
            for n, v in zip(self._names, outputs, strict=True)}
        return values


BACKEND = BACKENDS.register("reference", ReferenceBackend())
