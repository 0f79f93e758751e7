"""The shape points placement measures a model with symbolic dimensions at: each point of
the config's shape profile (`tessera.config._shapes`), or one default point without a
profile. Each point is a static view of the model (`Model.at`): the same nodes, every shape
known, so a candidate's submodel at a point has static shapes and its cost is keyed by them
in the cost database. A static model has one point, itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from tessera.config import CompilationConfig, ShapePoint, ShapeProfile
from tessera.config._shapes import DEFAULT_SEQUENCE
from tessera.errors import ModelError
from tessera.ir import Model


@dataclass(frozen=True, eq=False)
class Points:
    model: Model
    points: tuple[ShapePoint, ...]
    defaulted: bool = False  # the model is dynamic and no profile was given

    @classmethod
    def of(cls, model: Model, config: CompilationConfig) -> Points:
        if model.is_static:
            return cls(model, (ShapePoint(()),))
        profile = config.options.shapes or ShapeProfile(())
        profile.check_names(model.symbols)
        return cls(model, tuple(profile.points(model.symbols)),
                   defaulted=config.options.shapes is None)

    @cached_property
    def views(self) -> tuple[tuple[ShapePoint, Model], ...]:
        """Each point and the model's static view there, made when first measured (a
        warm compile measures nothing; each view holds a copy of the weights)."""
        if not self.dynamic:
            return ((self.points[0], self.model),)
        return tuple((p, self._view(p)) for p in self.points)

    def _view(self, point: ShapePoint) -> Model:
        """The static view at `point`; without a profile, a size the model contradicts is a
        ModelError saying to give one (a profile's points were checked before placing)."""
        try:
            return self.model.at(point.as_dict())
        except ModelError as err:
            if not self.defaulted:
                raise
            raise ModelError(
                f"{err}; without a shape profile each symbolic dimension is measured at its "
                f"default size (1, {DEFAULT_SEQUENCE} for a sequence-like name): give the "
                f"sizes to place at with the option shapes (--shape-profile)"
                f"{ShapeProfile(()).sum_hint(self.model.symbols)}") from None

    @property
    def dynamic(self) -> bool:
        return bool(self.points[0].sizes)

    @property
    def weights(self) -> list[float]:
        total = sum(p.weight for p in self.points)
        return [p.weight / total for p in self.points]

    def mean(self, values: Sequence[float]) -> float:
        """The profile's weighted mean of per-point figures."""
        return sum(w * v for w, v in zip(self.weights, values, strict=True))

    def shapes(self, index: int, names: Sequence[str]) -> Mapping[str, tuple[int, ...]]:
        """The static shapes of `names` at point `index` (those the view knows)."""
        view = self.views[index][1]
        return {n: s for n in names if (s := view.static_shape(n)) is not None}

    def labels(self) -> tuple[str, ...]:
        return tuple(str(p) for p in self.points)


__all__ = ["Points"]
