"""Shape profiles: the sizes of a model's symbolic dimensions that placement measures at, and
the ranges the compiled model accepts. In the manner of TensorRT's optimisation profiles,
each dimension has either representative values (`batch=1,4`, optionally weighted:
`sequence=32@1,128@3`) or a range with an optimum (`sequence=1:128:512`, min:opt:max). A
range is measured at its optimum and bounds what `run` accepts.

The profile's points are every combination of its dimensions' measured values; a
dimension the profile leaves out is measured at its default size (`default_size`). A point's
weight is the product of its values' weights, so the search minimises the profile's
weighted total cost. `str` gives the canonical spec back (`batch=1,4;sequence=1:128:512`),
which the config's JSON and the artifact keep."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tessera.errors import ConfigError, InputError

MAX_POINTS = 8  # each point multiplies the measurements of a cold search
DEFAULT_SEQUENCE = 128  # what a sequence-like dimension is measured at without a profile
_SEQUENCE_LIKE = re.compile(r"seq|len|token|time|step", re.IGNORECASE)


def default_size(name: str) -> int:
    """The size a symbolic dimension is measured at without a profile: 128 where its name
    says it counts a sequence (sequence, length, tokens, time, steps), else 1."""
    return DEFAULT_SEQUENCE if _SEQUENCE_LIKE.search(name) else 1


@dataclass(frozen=True)
class DimProfile:
    """One dimension: the values measured and their weights, and the allowed range (None
    where the profile gives values rather than a range)."""

    name: str
    values: tuple[int, ...]
    weights: tuple[float, ...]
    low: int | None = None
    high: int | None = None

    @property
    def is_range(self) -> bool:
        return self.low is not None

    def allows(self, size: int) -> bool:
        return self.low is None or self.high is None or self.low <= size <= self.high

    def __str__(self) -> str:
        if self.is_range:
            return f"{self.name}={self.low}:{self.values[0]}:{self.high}"
        if all(w == 1.0 for w in self.weights):
            return f"{self.name}={','.join(map(str, self.values))}"
        return f"{self.name}=" + ",".join(f"{v}@{_number(w)}" for v, w in
                                          zip(self.values, self.weights, strict=True))


@dataclass(frozen=True)
class ShapePoint:
    """One point of a profile: a size for each symbolic dimension, and its weight."""

    sizes: tuple[tuple[str, int], ...]
    weight: float = 1.0

    def as_dict(self) -> dict[str, int]:
        return dict(self.sizes)

    def __str__(self) -> str:
        return ",".join(f"{n}={s}" for n, s in self.sizes) or "static"


@dataclass(frozen=True)
class ShapeProfile:
    dims: tuple[DimProfile, ...]  # sorted by name

    @classmethod
    def parse(cls, spec: object) -> ShapeProfile:
        """From a ShapeProfile, a mapping (`{"batch": [1, 4], "sequence": (1, 128, 512)}`,
        or `{"sequence": {32: 1, 128: 3}}` for weights) or the string form
        (`batch=1,4;sequence=1:128:512`, also with spaces between dimensions). Every
        problem is a ConfigError naming the dimension and the value."""
        if isinstance(spec, ShapeProfile):
            return spec
        if isinstance(spec, str):
            items: dict[str, object] = {}
            for part in (p for p in re.split(r"[;\s]+", spec.strip()) if p):
                name, sep, values = part.partition("=")
                if not sep or not name or not values:
                    raise ConfigError(f"shape profile entry {part!r} is not NAME=VALUES "
                                      "(sequence=1:128:512 or batch=1,4)")
                if name in items:
                    raise ConfigError(f"shape profile names dimension {name!r} twice")
                items[name] = values
            spec = items
        if not isinstance(spec, Mapping):
            raise ConfigError(f"a shape profile is a mapping such as {{'batch': [1, 4], "
                              f"'sequence': (1, 128, 512)}} or a string such as "
                              f"'batch=1,4;sequence=1:128:512', not {type(spec).__name__}")
        dims = tuple(sorted((_dim(str(n), v) for n, v in spec.items()), key=lambda d: d.name))
        profile = cls(dims)
        count = len(profile.points(profile.names))
        if count > MAX_POINTS:
            raise ConfigError(f"shape profile {profile} has {count} points; at most "
                              f"{MAX_POINTS}: each is measured on every candidate, so give "
                              "fewer values or a range (min:opt:max)")
        return profile

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def get(self, name: str) -> DimProfile | None:
        return next((d for d in self.dims if d.name == name), None)

    def points(self, symbols: Sequence[str]) -> list[ShapePoint]:
        """The points measured for a model whose symbolic dimensions are `symbols`: every
        combination of the profile's values, the others at their default sizes."""
        axes: list[list[tuple[str, int, float]]] = []
        for name in symbols:
            dim = self.get(name)
            axes.append([(name, v, w) for v, w in zip(dim.values, dim.weights, strict=True)]
                        if dim is not None else [(name, default_size(name), 1.0)])
        points = []
        for combo in itertools.product(*axes):
            weight = 1.0
            for _, _, w in combo:
                weight *= w
            points.append(ShapePoint(tuple((n, v) for n, v, _ in combo), weight))
        return points

    def check_names(self, symbols: Sequence[str]) -> None:
        """A ConfigError for each dimension the profile names that the model lacks."""
        from tessera._private.registry import did_you_mean

        for name in self.names:
            if name not in symbols:
                raise ConfigError(
                    f"shape profile names dimension {name!r}, which no model input has"
                    f"{did_you_mean(name, list(symbols))} (symbolic dimensions: "
                    f"{', '.join(symbols) or 'none: the model is static'})")

    def check_size(self, name: str, size: int, where: str) -> None:
        """An InputError when `size` lies outside the range the profile gives `name`."""
        dim = self.get(name)
        if dim is not None and not dim.allows(size):
            raise InputError(f"{where}: dimension {name!r} is {size}, outside the profile's "
                             f"range {dim.low}..{dim.high}; compile with a wider range "
                             f"(--shape-profile {name}={dim.low}:{dim.values[0]}:{size})"
                             if dim.high is not None and size > dim.high else
                             f"{where}: dimension {name!r} is {size}, outside the profile's "
                             f"range {dim.low}..{dim.high}")

    def __str__(self) -> str:
        return ";".join(str(d) for d in self.dims)


def _number(weight: float) -> str:
    """The shortest text that parses back to `weight` exactly (the spec is a cache key)."""
    short = f"{weight:g}"
    return short if float(short) == weight else repr(weight)


def _dim(name: str, value: object) -> DimProfile:
    where = f"shape profile dimension {name!r}"
    if isinstance(value, str):
        text = value.strip()
        if ":" in text:
            value = tuple(_int(p, where) for p in text.split(":"))
            if len(value) != 3:
                raise ConfigError(f"{where}: a range is min:opt:max, got {text!r}")
        else:
            weighted: dict[int, float] = {}
            for item in (p for p in text.split(",") if p.strip()):
                size, _, weight = item.partition("@")
                number = _int(size, where)
                if number in weighted:
                    raise ConfigError(f"{where}: size {number} is given twice in {text!r}")
                weighted[number] = _weight(weight, where) if weight else 1.0
            value = weighted
    if isinstance(value, tuple):  # (min, opt, max)
        if len(value) != 3:
            raise ConfigError(f"{where}: a tuple is (min, opt, max), got {value!r}; give a "
                              "list for representative values")
        low, opt, high = (_int(v, where) for v in value)
        if not low <= opt <= high:
            raise ConfigError(f"{where}: the range needs min <= opt <= max, got "
                              f"{low}:{opt}:{high}")
        return DimProfile(name, (opt,), (1.0,), low, high)
    if isinstance(value, Mapping):
        pairs = [(_int(v, where), _weight(w, where)) for v, w in value.items()]
    elif isinstance(value, int | list):
        pairs = [(_int(v, where), 1.0) for v in (value if isinstance(value, list) else [value])]
    else:
        raise ConfigError(f"{where}: expected a list of sizes, a (min, opt, max) tuple or "
                          f"a mapping of size to weight, got {value!r}")
    if not pairs:
        raise ConfigError(f"{where}: no sizes given")
    sizes = [s for s, _ in pairs]
    if len(set(sizes)) != len(sizes):
        raise ConfigError(f"{where}: a size is given twice in {sizes}")
    return DimProfile(name, tuple(sizes), tuple(w for _, w in pairs))


def _int(value: object, where: str) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < 1:
        raise ConfigError(f"{where}: sizes are whole numbers of at least 1, got {value!r}")
    return number


def _weight(value: object, where: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")
    if not number > 0:
        raise ConfigError(f"{where}: weights are numbers above 0, got {value!r}")
    return number


__all__ = ["DEFAULT_SEQUENCE", "MAX_POINTS", "DimProfile", "ShapePoint", "ShapeProfile",
           "default_size"]
