"""A decoder's loop on ONNX Runtime through I/O binding: each step's presents stay ONNX Runtime
values (`OrtValue`, in its own arena) and are bound as the next step's pasts as they are,
never turned into numpy arrays and back; only the new tokens go in and the logits come out.
The graph's own Concat still grows the cache by one copy a step, as it does inside every
backend that runs the exported graph."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tessera.errors import InputError

if TYPE_CHECKING:
    import numpy as np

CACHE = "onnxruntime I/O binding"


class _PerThread(threading.local):
    presents: list[Any] | None = None  # the last step's present OrtValues, in `cache` order


class OrtBoundDecoder:
    """`session` run as a `StatefulDecoder`: `cache` pairs each past input with its present
    output, `empty` gives a past's shape for a batch when the cache is empty."""

    cache = CACHE

    def __init__(self, session: Any, cache: Mapping[str, str], logits: str,
                 empty: Callable[[str, int], tuple[int, ...]],
                 dtypes: Mapping[str, np.dtype[Any]],
                 failure: Callable[[Exception], Exception]) -> None:
        self.session = session
        self.pairs: Sequence[tuple[str, str]] = tuple(cache.items())
        self.logits = logits
        self.inputs = frozenset(i.name for i in session.get_inputs()) - set(cache)
        self._empty, self._dtypes, self._failure = empty, dict(dtypes), failure
        self._outputs = [logits, *(present for _, present in self.pairs)]
        self._local = _PerThread()

    def reset(self) -> None:
        """Empty the calling thread's cache: the next `step` is a prefill."""
        self._local.presents = None

    def load(self, cache: Mapping[str, np.ndarray]) -> None:
        """Start the calling thread's cache from `cache` (by past name): one copy into ONNX
        Runtime's values, kept from then on."""
        import numpy as np
        from onnxruntime import OrtValue

        missing = [past for past, _ in self.pairs if past not in cache]
        if missing:
            raise InputError(f"the cache handed over lacks {missing[0]!r}; give every past "
                             "input's value")
        self._local.presents = [
            OrtValue.ortvalue_from_numpy(np.ascontiguousarray(cache[past], self._dtypes[past]))
            for past, _ in self.pairs]

    def step(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """The logits of the new tokens in `feeds` (the inputs other than the pasts), the
        cache grown by them and kept as ONNX Runtime values."""
        import numpy as np

        if feeds.keys() != self.inputs:
            raise InputError(f"the bound decoder takes the inputs {sorted(self.inputs)}, "
                             f"got {sorted(feeds)}")
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        presents = self._local.presents
        if presents is None:
            batch = int(next(iter(feeds.values())).shape[0])
            for past, _ in self.pairs:
                binding.bind_cpu_input(past, np.zeros(self._empty(past, batch),
                                                      self._dtypes[past]))
        else:
            for (past, _), value in zip(self.pairs, presents, strict=True):
                binding.bind_ortvalue_input(past, value)
        for name in self._outputs:
            binding.bind_output(name, "cpu")
        try:
            self.session.run_with_iobinding(binding)
        except Exception as err:
            raise self._failure(err) from err
        values = binding.get_outputs()
        self._local.presents = list(values[1:])
        return np.asarray(values[0].numpy())

    def presents(self) -> list[Any]:
        """The calling thread's cache: the present OrtValues of the last step, in the pairs'
        order (empty before the first step)."""
        return list(self._local.presents or ())


__all__ = ["CACHE", "OrtBoundDecoder"]
