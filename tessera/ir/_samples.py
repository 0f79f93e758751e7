"""The user's own inputs for a model: what accuracy is measured on (and, later, what
precision variants are calibrated with).

A source is one `.npz` file (one sample: each array is the input of its name), a directory
of `.npz` files (one sample each, in the order of their names), a mapping of input names to
arrays (one sample), or an iterable of such mappings. Every sample is checked against the
model's inputs: names, dtypes, static dimensions, and the same size for a symbolic dimension
wherever it appears within the sample (a batch may differ between samples)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera.errors import InputError
from tessera.ir._model import Model

if TYPE_CHECKING:
    import numpy as np

SampleSource = str | os.PathLike[str] | Mapping[str, Any] | Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class Sample:
    label: str  # the file's name, or 'sample N' (from 0) for one given in Python
    inputs: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Samples:
    """Checked samples, in order. `split()` gives the calibration and validation sets."""

    items: tuple[Sample, ...]

    @classmethod
    def load(cls, source: SampleSource | Samples, model: Model) -> Samples:
        """The samples of `source` checked against `model`'s inputs; an InputError names the
        sample, the input and what is wrong."""
        if isinstance(source, Samples):
            items = source.items
        elif isinstance(source, str | os.PathLike):
            items = _from_path(Path(source))
        elif isinstance(source, Mapping):
            items = (_sample("sample 0", source),)
        else:
            try:
                given = list(source)
            except TypeError:
                raise InputError(f"samples: expected a .npz file, a directory of .npz files or "
                                 f"an iterable of input dicts, got {type(source).__name__}"
                                 ) from None
            items = tuple(_sample(f"sample {i}", s) for i, s in enumerate(given))
        if not items:
            raise InputError("samples: none given; give at least one input dict or .npz file")
        expected = _expected(model)
        for item in items:
            _check(item, expected)
        return cls(items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Mapping[str, np.ndarray]]:
        return (item.inputs for item in self.items)

    @property
    def labels(self) -> list[str]:
        return [item.label for item in self.items]

    def split(self, calibrating: int | None = None) -> tuple[Samples, Samples]:
        """(calibration, validation), deterministically and disjoint: the samples at even
        positions (first, third, ...) calibrate, those at odd positions validate, so two or
        more samples give at least one to each. A single sample serves as both. With
        `calibrating`, only the first that many of the calibration half calibrate."""
        if len(self.items) == 1:
            return self, self
        return Samples(self.items[0::2][:calibrating]), Samples(self.items[1::2])

    @property
    def digest(self) -> str:
        """A digest of the samples' contents, in order (names, dtypes, shapes, values)."""
        import numpy as np

        hasher = hashlib.sha256()
        for item in self.items:
            hasher.update(b"\x00sample")
            for name in sorted(item.inputs):
                array = np.ascontiguousarray(item.inputs[name])
                hasher.update(f"\x00{name}\x00{array.dtype.name}\x00{array.shape}".encode())
                hasher.update(array.tobytes())
        return hasher.hexdigest()[:32]


def _from_path(path: Path) -> tuple[Sample, ...]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".npz" and p.is_file())
        if not files:
            raise InputError(f"samples: the directory {path} holds no .npz file; save each "
                             "sample with numpy.savez(FILE, name=array, ...)")
        return tuple(_read_npz(p) for p in files)
    if path.suffix != ".npz" or not path.is_file():
        raise InputError(f"samples: {path} is not a .npz file or a directory of them")
    return (_read_npz(path),)


def _read_npz(path: Path) -> Sample:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            return Sample(path.name, {name: data[name] for name in data.files})
    except (OSError, ValueError) as err:
        raise InputError(f"sample {path.name}: cannot read it as .npz: {err}") from None


def _sample(label: str, inputs: object) -> Sample:
    import numpy as np

    if not isinstance(inputs, Mapping):
        raise InputError(f"{label}: expected a dict of input names to arrays, got "
                         f"{type(inputs).__name__}")
    try:
        return Sample(label, {str(k): np.asarray(v) for k, v in inputs.items()})
    except (TypeError, ValueError) as err:
        raise InputError(f"{label}: an input is not an array: {err}") from None


def _expected(model: Model) -> dict[str, tuple[str, tuple[int | str | None, ...] | None]]:
    """input name -> (numpy dtype name, declared shape)."""
    import onnx

    types = model.dataflow.value_types
    expected = {}
    for name in model.input_names:
        value_type = types.get(name)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value_type.elem_type).name \
            if value_type is not None and value_type.elem_type else "float32"
        expected[name] = (dtype, value_type.shape if value_type is not None else None)
    return expected


def _check(sample: Sample,
           expected: Mapping[str, tuple[str, tuple[int | str | None, ...] | None]]) -> None:
    where = f"sample {sample.label!r}" if not sample.label.startswith("sample ") \
        else sample.label
    missing = [n for n in expected if n not in sample.inputs]
    extra = [n for n in sample.inputs if n not in expected]
    if missing or extra:
        raise InputError(f"{where}: inputs do not match the model's: missing {missing}, "
                         f"unexpected {extra}; the model takes {list(expected)}")
    sizes: dict[str, tuple[int, str]] = {}  # symbolic dimension -> (size, input seen in)
    for name, (dtype, shape) in expected.items():
        array = sample.inputs[name]
        if array.dtype.name != dtype:
            raise InputError(f"{where}, input {name!r}: dtype {array.dtype.name}, the model "
                             f"expects {dtype} (convert with .astype('{dtype}'))")
        if shape is None:
            continue
        if len(array.shape) != len(shape):
            raise InputError(f"{where}, input {name!r}: shape {list(array.shape)} has rank "
                             f"{array.ndim}, the model expects {list(shape)}")
        for axis, (dim, size) in enumerate(zip(shape, array.shape, strict=True)):
            if isinstance(dim, int) and dim != size:
                raise InputError(f"{where}, input {name!r}: dimension {axis} is {size}, the "
                                 f"model expects {list(shape)}")
            if isinstance(dim, str) and dim:
                seen = sizes.setdefault(dim, (size, name))
                if seen[0] != size:
                    raise InputError(f"{where}, input {name!r}: dimension {axis} ({dim!r}) is "
                                     f"{size}, but {dim!r} is {seen[0]} in input {seen[1]!r}; "
                                     "a symbolic dimension has one size within a sample")


__all__ = ["Sample", "SampleSource", "Samples"]
