"""A decoder's key/value cache kept inside OpenVINO between steps, as OpenVINO GenAI runs
one. `apply_make_stateful_transformation` turns each past input and the present output that
gives it back into a variable (ReadValue at the start, Assign at the end): the infer request
carries the cache from one call to the next, and `reset_state` empties it.

The transformation gives each ReadValue no initial value, and then OpenVINO starts the
cache with every dynamic dimension 0, the batch included: a prefill of any batch gives
logits of shape [0, 0, vocab], without an error. So each variable starts as zeros broadcast
to [batch of the token ids, its fixed sizes, 0 on the dimension it grows on]: the prefill's
empty past, of the batch of the call that reads it.

Where the attention has the exported pattern, it becomes ScaledDotProductAttention reading
each variable through a beam Gather (`_ov_attention`): the CPU plugin then keeps the cache
inside its attention kernel and appends each step's keys and values in place. The Gather's
input is fed here, so callers never see it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tessera._private.text import typed_line
from tessera.backends._ov_attention import BEAM, fuse_attention, gather_beams
from tessera.errors import CompileError, InputError

if TYPE_CHECKING:
    import numpy as np

CACHE = "openvino state"


def make_stateful(model: Any, cache: Mapping[str, str], tokens: str) -> dict[str, str]:
    """`model` (an `openvino.Model`) with each past input of `cache` and its present output
    made a variable, which starts as the empty past of the batch that `tokens` (the token
    ids, [batch, sequence]) has; the variable of each past, by its name."""
    import numpy as np
    from openvino import opset13
    from openvino._offline_transformations import apply_make_stateful_transformation

    apply_make_stateful_transformation(model, dict(cache))
    variables = {}
    ids = model.input(tokens)
    batch = opset13.gather(opset13.shape_of(ids, output_type="i64"),
                           opset13.constant(np.array([0], np.int64)),
                           opset13.constant(np.int64(0)))
    for op in model.get_ops():
        if op.get_type_name() != "ReadValue":
            continue
        dims = [batch if axis == 0 else
                opset13.constant(np.array([d.get_length() if d.is_static else 0], np.int64))
                for axis, d in enumerate(op.get_output_partial_shape(0))]
        zero = opset13.constant(np.zeros((), op.get_output_element_type(0).to_dtype()))
        op.set_arguments([opset13.broadcast(zero, opset13.concat(dims, 0))])
        past = next((n for n in sorted(op.output(0).get_names()) if n in cache), None)
        if past is not None:  # the variable keeps the past's name on its output
            variables[past] = op.get_variable_id()
    model.validate_nodes_and_infer_types()
    return variables


def stateful_config(config: Mapping[str, str], supported: Any) -> dict[str, str]:
    """The compile properties of the stateful form: the partition's own (`config`, from its
    target: threads, precision hint), with the cache held in the precision the partition
    computes in. The CPU plugin would otherwise keep it as u8 where it fuses the attention
    over the cache (KV_CACHE_PRECISION), which f32 numerics do not allow."""
    wanted = dict(config)
    if "KV_CACHE_PRECISION" in supported and "INFERENCE_PRECISION_HINT" in wanted:
        wanted.setdefault("KV_CACHE_PRECISION", wanted["INFERENCE_PRECISION_HINT"])
    return wanted


class _PerThread(threading.local):
    request: Any = None


class OpenVinoStatefulDecoder:
    """The compiled stateful form of a decoder (`make_stateful`): `step` feeds the token
    ids, the attention mask and the position ids alone and gives back the logits; the cache
    stays in the calling thread's infer request until `reset`."""

    cache = CACHE

    def __init__(self, compiled: Any, logits: str, failure: Callable[[Exception], Exception],
                 aliases: Mapping[str, Any], variables: Mapping[str, str] | None = None,
                 tokens: str | None = None) -> None:
        self.compiled = compiled  # the openvino.CompiledModel
        names = frozenset(port.get_any_name() for port in compiled.inputs)
        self.inputs = names - {BEAM}
        self._beams = tokens if BEAM in names else None  # the input whose batch it follows
        self.logits = logits
        self.variables = dict(variables or {})  # past input -> the variable holding it
        self._failure = failure
        self._aliases = aliases  # numpy's second names of types, as OpenVINO's own names
        self._local = _PerThread()

    def _request(self) -> Any:
        request = self._local.request
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        return request

    def reset(self) -> None:
        """Empty the calling thread's cache: the next `step` is a prefill."""
        self._request().reset_state()

    def step(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """The logits of the new tokens in `feeds` (exactly the inputs left once the cache
        is state), the cache grown by them. The logits are the caller's own array."""
        import numpy as np

        if feeds.keys() != self.inputs:
            raise InputError(f"the stateful decoder takes the inputs {sorted(self.inputs)}, "
                             f"got {sorted(feeds)}")
        aliases = self._aliases
        shared = {name: value.view(aliases[value.dtype.char])
                  if value.dtype.char in aliases else value for name, value in feeds.items()}
        if self._beams is not None:  # each row keeps its own cache
            shared[BEAM] = np.arange(feeds[self._beams].shape[0], dtype=np.int32)
        try:
            outputs = self._request().infer(shared, share_inputs=True)
            return np.asarray(outputs[self.logits])
        except Exception as err:
            raise self._failure(err) from err

    def load(self, cache: Mapping[str, np.ndarray]) -> None:
        """Start the calling thread's cache from `cache` (by past name), copied into the
        variables once."""
        import numpy as np
        from openvino import Tensor

        by_variable = {variable: past for past, variable in self.variables.items()}
        states = self._request().query_state()
        missing = [past for past in self.variables if past not in cache]
        if missing or not states or any(s.name not in by_variable for s in states):
            raise InputError(f"the cache handed over lacks {(missing or ['a past'])[0]!r}; "
                             "give every past input's value")
        try:
            for state in states:
                value = np.ascontiguousarray(cache[by_variable[state.name]])
                state.state = Tensor(value)
        except Exception as err:
            raise self._failure(err) from err

    @property
    def state(self) -> dict[str, tuple[int, ...]]:
        """The shape of each variable of the calling thread's cache (by variable name)."""
        return {s.name: tuple(s.state.shape) for s in self._request().query_state()}


def build(read: Callable[[], Any], core: Any, config: Mapping[str, str],
          cache: Mapping[str, str], tokens: str, logits: str,
          failure: Callable[[Exception], Exception], aliases: Mapping[str, Any]
          ) -> OpenVinoStatefulDecoder:
    """The model `read()` gives made stateful over `cache` and compiled with `config`;
    `failure` makes a run's error an ExecutionError, and `aliases` maps numpy's second
    names of types (long long) to those OpenVINO takes."""
    try:
        properties = stateful_config(config, core.get_property("CPU", "SUPPORTED_PROPERTIES"))
        model = read()
        fused = fuse_attention(model)
        variables = make_stateful(model, cache, tokens)
        # a key and a value variable per attention, every one read by its kernel; where
        # any is not, a beam Gather would copy the whole cache each step
        beams = fused > 0 and 2 * fused == len(variables) and gather_beams(model)
        compiled = core.compile_model(model, "CPU", properties)
        if beams and 2 * cached_attention(compiled) < len(variables):  # the plugin kept some apart
            model = read()
            variables = make_stateful(model, cache, tokens)
            compiled = core.compile_model(model, "CPU", properties)
    except Exception as err:
        raise CompileError(f"openvino could not keep the decoder's key/value cache as state: "
                           f"{typed_line(err)}") from err
    return OpenVinoStatefulDecoder(compiled, logits, failure, aliases, variables, tokens)


def cached_attention(compiled: Any) -> int:
    """How many attention kernels of `compiled` (an `openvino.CompiledModel`) hold their
    key/value cache: the CPU plugin's fused ScaledDotProductAttention layers."""
    infos = [op.get_rt_info() for op in compiled.get_runtime_model().get_ops()]
    return sum(1 for info in infos if "layerType" in info
               and info["layerType"].astype(str) == "ScaledDotProductAttention")


__all__ = ["CACHE", "OpenVinoStatefulDecoder", "build", "cached_attention", "make_stateful",
           "stateful_config"]
