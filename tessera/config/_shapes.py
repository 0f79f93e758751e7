"""Shape profiles: the sizes of a model's symbolic dimensions that placement measures at, and
the ranges the compiled model accepts. In the manner of TensorRT's optimisation profiles,
each dimension has either representative values (`batch=1,4`, optionally weighted:
`sequence=32@1,128@3`), a range with an optimum (`sequence=1:128:512`, min:opt:max), or is
the sum of others (`total_sequence=past_sequence+sequence`, optionally plus a whole number:
`total=past+1`). A range is measured at its optimum and bounds what `run` accepts. A sum has
no sizes of its own: at every point it is computed from the dimensions it names, and `run`
accepts only inputs where it equals that sum (a decoder's attention mask over the cache and
the new tokens). Zero may start a range or be listed (a decoder's empty past at the
prefill); the model is checked there, but never measured there: an empty dimension measures
nothing.

The profile's points are every combination of its dimensions' measured values, each sum
computed from them; a dimension the profile leaves out is measured at its default size
(`default_size`). A point's weight is the product of its values' weights, so the search
minimises the profile's weighted total cost. `str` gives the canonical spec back
(`batch=1,4;sequence=1:128:512`), which the config's JSON and the artifact keep."""

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
    """One dimension: the values given and their weights (a listed 0 is checked, never
    measured, and weighs 1), and the allowed range (None where the profile gives values
    rather than a range). A sum (`terms`, sorted, plus `constant`) has no values: its size
    at each point is the sum of its terms' sizes there."""

    name: str
    values: tuple[int, ...]
    weights: tuple[float, ...]
    low: int | None = None
    high: int | None = None
    terms: tuple[str, ...] = ()
    constant: int = 0

    @property
    def is_range(self) -> bool:
        return self.low is not None

    @property
    def is_sum(self) -> bool:
        return bool(self.terms)

    @property
    def measured(self) -> tuple[tuple[int, float], ...]:
        """The sizes measured and their weights: every value but 0."""
        return tuple((v, w) for v, w in zip(self.values, self.weights, strict=True) if v)

    @property
    def checked(self) -> tuple[int, ...]:
        """The sizes the model is checked at beside the measured ones: a range's ends, a
        listed 0."""
        if self.is_range:
            return tuple(e for e in (self.low, self.high) if e is not None)
        return tuple(v for v in self.values if not v)

    def allows(self, size: int) -> bool:
        return self.low is None or self.high is None or self.low <= size <= self.high

    @property
    def formula(self) -> str:
        """A sum as written in the profile: `past_sequence+sequence`, `past+1`. A lone term
        keeps its `+0`, so the text still reads as a sum."""
        return "+".join([*self.terms, *([str(self.constant)] if self.constant or len(
            self.terms) == 1 else [])])

    def __str__(self) -> str:
        if self.is_sum:
            return f"{self.name}={self.formula}"
        if self.is_range:
            return f"{self.name}={self.low}:{self.values[0]}:{self.high}"
        if all(w == 1.0 for w in self.weights):
            return f"{self.name}={','.join(map(str, self.values))}"
        return f"{self.name}=" + ",".join(f"{v}@{_number(w)}" if v else str(v) for v, w in
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
        `{"sequence": {32: 1, 128: 3}}` for weights, `{"total": "past+sequence"}` for a sum)
        or the string form (`batch=1,4;sequence=1:128:512;total=past+sequence`, also with
        spaces between dimensions). Every problem is a ConfigError naming the dimension and
        the value."""
        if isinstance(spec, ShapeProfile):
            return spec
        if isinstance(spec, str):
            items: dict[str, object] = {}
            text = re.sub(r"\s*([+=])\s*", r"\1", spec.strip())  # `t = p + s`: one entry
            for part in (p for p in re.split(r"[;\s]+", text) if p):
                name, sep, values = part.partition("=")
                if not sep or not name or not values:
                    raise ConfigError(f"shape profile entry {part!r} is not NAME=VALUES "
                                      "(sequence=1:128:512, batch=1,4 or "
                                      "total_sequence=past_sequence+sequence)")
                if name in items:
                    raise ConfigError(f"shape profile names dimension {name!r} twice")
                items[name] = values
            spec = items
        if not isinstance(spec, Mapping):
            raise ConfigError(f"a shape profile is a mapping such as {{'batch': [1, 4], "
                              f"'sequence': (1, 128, 512)}} or a string such as "
                              f"'batch=1,4;sequence=1:128:512', not {type(spec).__name__}")
        dims = tuple(sorted((_dim(str(n), v) for n, v in spec.items()), key=lambda d: d.name))
        _check_sums(dims)
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
        combination of the profile's measured values, the others at their default sizes,
        each sum computed from them."""
        needed = [*symbols, *(n for n in self._terms_of(symbols) if n not in symbols)]
        axes: list[list[tuple[str, int, float]]] = []
        for name in needed:
            dim = self.get(name)
            if dim is None:
                axes.append([(name, default_size(name), 1.0)])
            elif not dim.is_sum:
                axes.append([(name, v, w) for v, w in dim.measured])
        points = []
        for combo in itertools.product(*axes):
            weight = 1.0
            for _, _, w in combo:
                weight *= w
            sizes = self.complete({n: v for n, v, _ in combo})
            points.append(ShapePoint(tuple((n, sizes[n]) for n in symbols), weight))
        return points

    def complete(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """`sizes` with each of the profile's sums computed from them (a size `sizes` gives
        a sum is replaced); a sum whose terms `sizes` lacks is left out."""
        done = {n: s for n, s in sizes.items() if not ((d := self.get(n)) and d.is_sum)}
        for dim in self.dims:
            if dim.is_sum and (size := self._sum(dim.name, done)) is not None:
                done[dim.name] = size
        return done

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

    def check_sums(self, seen: Mapping[str, tuple[int, str]]) -> None:
        """An InputError for a sum whose size in one call differs from the sum of its terms'
        sizes there. `seen` maps each dimension of the call to its size and the input it was
        read from; a sum whose terms no input has is not judged."""
        sizes = {n: s for n, (s, _) in seen.items()}
        for dim in self.dims:
            if not dim.is_sum or dim.name not in seen:
                continue
            want = self._sum(dim.name, sizes)
            size, where = seen[dim.name]
            if want is None or size == want:
                continue
            parts = [str(self._sum(t, sizes)) for t in dim.terms] + (
                [str(dim.constant)] if dim.constant else [])
            whence = ", ".join(f"{t}={seen[t][0]} in {seen[t][1]!r}" for t in dim.terms
                               if t in seen)
            raise InputError(f"input {where!r}: dimension {dim.name!r} is {size}, but the "
                             f"shape profile makes it {dim.formula} = {'+'.join(parts)} = "
                             f"{want} ({whence}); give inputs whose sizes keep "
                             f"{dim.name} = {dim.formula}")

    def _sum(self, name: str, sizes: Mapping[str, int]) -> int | None:
        """The size of `name` at `sizes`: given there, or computed where it is a sum."""
        dim = self.get(name)
        if dim is None or not dim.is_sum:
            return sizes.get(name)
        total = dim.constant
        for term in dim.terms:
            size = self._sum(term, sizes)
            if size is None:
                return None
            total += size
        return total

    def _terms_of(self, symbols: Sequence[str]) -> list[str]:
        """The dimensions with sizes of their own that the sums among `symbols` add up, in
        the order met."""
        found: dict[str, None] = {}
        pending = [d for n in symbols if (d := self.get(n)) is not None and d.is_sum]
        while pending:
            for term in pending.pop(0).terms:
                dim = self.get(term)
                if dim is not None and dim.is_sum:
                    pending.append(dim)
                else:
                    found[term] = None
        return list(found)

    def sum_hint(self, symbols: Sequence[str]) -> str:
        """Where a model's symbolic dimensions read as a decoder's tied lengths (one named
        like total, one like past and one other sequence-like one) and the profile does not
        tie them, the profile form that does, as a clause to append to an error; else ''."""
        total = [n for n in symbols if _TOTAL.search(n)]
        past = [n for n in symbols if _PAST.search(n) and not _TOTAL.search(n)]
        new = [n for n in symbols if n not in total and n not in past
               and default_size(n) == DEFAULT_SEQUENCE]
        if len(total) != 1 or len(past) != 1 or len(new) != 1:
            return ""
        dim = self.get(total[0])
        if dim is not None and dim.is_sum:
            return ""
        t, p, s = total[0], past[0], new[0]
        return (f"; if {t} = {p} + {s} (a decoder with a key/value cache), give a shape "
                f"profile that says so, e.g. shapes='{s}=1:1:64;{p}=0:16:63;{t}={p}+{s}' "
                "(docs/decoders.md)")

    def __str__(self) -> str:
        return ";".join(str(d) for d in self.dims)


_TOTAL, _PAST = re.compile(r"total", re.IGNORECASE), re.compile(r"past", re.IGNORECASE)


def _number(weight: float) -> str:
    """The shortest text that parses back to `weight` exactly (the spec is a cache key)."""
    short = f"{weight:g}"
    return short if float(short) == weight else repr(weight)


def _dim(name: str, value: object) -> DimProfile:
    where = f"shape profile dimension {name!r}"
    if isinstance(value, str):
        text = value.strip()
        if "+" in text and not any(c in text for c in "@:,"):  # not a weight's 1e+06
            return _sum_dim(name, text, where)
        if ":" in text:
            value = tuple(_int(p, where) for p in text.split(":"))
            if len(value) != 3:
                raise ConfigError(f"{where}: a range is min:opt:max, got {text!r}")
        else:
            weighted: dict[int, float | None] = {}
            for item in (p for p in text.split(",") if p.strip()):
                size, _, weight = item.partition("@")
                number = _int(size, where)
                if number in weighted:
                    raise ConfigError(f"{where}: size {number} is given twice in {text!r}")
                weighted[number] = _weight(weight, where) if weight else None
            value = weighted
    if isinstance(value, tuple):  # (min, opt, max)
        if len(value) != 3:
            raise ConfigError(f"{where}: a tuple is (min, opt, max), got {value!r}; give a "
                              "list for representative values")
        low, opt, high = (_int(v, where) for v in value)
        if opt == 0:
            raise ConfigError(f"{where}: the range {low}:{opt}:{high} is measured at its "
                              "optimum, and an empty dimension measures nothing: give an "
                              f"optimum of at least 1 ({low}:1:{max(high, 1)})")
        if not low <= opt <= high:
            raise ConfigError(f"{where}: the range needs min <= opt <= max, got "
                              f"{low}:{opt}:{high}")
        return DimProfile(name, (opt,), (1.0,), low, high)
    if isinstance(value, Mapping):
        pairs = [(_int(v, where), None if w is None else _weight(w, where))
                 for v, w in value.items()]
    elif isinstance(value, int | list):
        pairs = [(_int(v, where), None) for v in (value if isinstance(value, list) else [value])]
    else:
        raise ConfigError(f"{where}: expected a list of sizes, a (min, opt, max) tuple, a "
                          f"mapping of size to weight or a sum such as 'past+sequence', got "
                          f"{value!r}")
    if not pairs:
        raise ConfigError(f"{where}: no sizes given")
    sizes = [s for s, _ in pairs]
    if len(set(sizes)) != len(sizes):
        raise ConfigError(f"{where}: a size is given twice in {sizes}")
    if 0 in sizes and dict(pairs)[0] not in (None, 1.0):
        raise ConfigError(f"{where}: size 0 is checked but never measured, so it takes no "
                          "weight; give it without @")
    if not any(sizes):
        raise ConfigError(f"{where}: 0 is checked but never measured (an empty dimension "
                          "measures nothing); list a size of at least 1 to measure at as "
                          f"well ({name}=0,1) or give a range ({name}=0:1:N)")
    return DimProfile(name, tuple(sizes), tuple(1.0 if w is None else w for _, w in pairs))


def _sum_dim(name: str, text: str, where: str) -> DimProfile:
    """`past+sequence`, `past+1`: dimension names joined by '+', plus whole numbers."""
    terms: list[str] = []
    constant = 0
    for part in (p.strip() for p in text.split("+")):
        if re.fullmatch(r"-?\d+", part):
            if int(part) < 0:
                raise ConfigError(f"{where}: a sum adds whole numbers of at least 0, got "
                                  f"{part!r} in {text!r}")
            constant += int(part)
        elif part:
            terms.append(part)
        else:
            raise ConfigError(f"{where}: a sum is dimension names joined by '+', optionally "
                              "plus a whole number (total_sequence=past_sequence+sequence, "
                              f"total=past+1), got {text!r}")
    if not terms:
        raise ConfigError(f"{where}: the sum {text!r} names no dimension; give a size "
                          f"({name}={constant}) or the dimensions it adds")
    if name in terms:
        raise ConfigError(f"{where}: the sum {text!r} names {name!r} itself; a sum adds "
                          "other dimensions")
    return DimProfile(name, (), (), terms=tuple(sorted(terms)), constant=constant)


def _check_sums(dims: Sequence[DimProfile]) -> None:
    """A ConfigError for a sum naming a dimension the profile does not give, or sums that
    depend on each other in a cycle."""
    from tessera._private.registry import did_you_mean

    by_name = {d.name: d for d in dims}
    for dim in dims:
        for term in dim.terms:
            if term not in by_name:
                raise ConfigError(
                    f"shape profile dimension {dim.name!r}: the sum {dim.formula} names "
                    f"dimension {term!r}, which the profile does not give: give {term} "
                    f"sizes of its own too ({term}=1,4 or {term}=0:16:64)"
                    f"{did_you_mean(term, list(by_name))}")
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in done:
            return
        if name in path:
            cycle = path[path.index(name):]
            raise ConfigError(
                "shape profile dimensions " + ", ".join(repr(n) for n in cycle) + " are sums "
                "of each other in a cycle (" + "; ".join(str(by_name[n]) for n in cycle) +
                "): give one of them sizes of its own")
        for term in by_name[name].terms:
            visit(term, [*path, name])
        done.add(name)

    for dim in dims:
        visit(dim.name, [])


def _int(value: object, where: str) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < 0:
        raise ConfigError(f"{where}: sizes are whole numbers of at least 0, got {value!r}"
                          + ("; a sum joins dimension names with '+' "
                             "(total_sequence=past_sequence+sequence)"
                             if isinstance(value, str) and value.strip()[:1].isalpha() else ""))
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
