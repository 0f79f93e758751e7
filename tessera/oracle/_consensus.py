"""The consensus oracle: the fp32 truth of a model (or a partition's submodel) on given
inputs, from independent implementations, never from one alone.

ONNX Runtime's CPU provider with graph optimisations off and `onnx.reference` answer first.
Where they agree, that is the truth. Where they disagree (or one cannot answer), a third is
asked (OpenVINO at f32, then torch) and the majority decides: an answer at least two
implementations agree on, held by more voters than any other. Where no majority exists the
truth is undecided, naming each implementation and what it said."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tessera._private.numeric import agree
from tessera._private.text import typed_line
from tessera.target import Target

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from tessera.ir import Model, Samples

Outputs = Mapping[str, Any]


@dataclass(frozen=True)
class Voter:
    """One independent implementation: a backend target, under the name users know."""

    label: str
    target: str

    @property
    def kind(self) -> str:
        return Target(self.target).kind.name


# The first two always vote; the rest only where those two disagree, in this order.
VOTERS = (
    Voter("onnxruntime (no graph optimisations)", "onnxruntime -opt-level=disable"),
    Voter("onnx.reference", "reference"),
    Voter("openvino f32", "openvino -precision=f32"),
    Voter("torch", "torch"),
)
FIRST = 2


@dataclass(frozen=True)
class Vote:
    """What one voter answered on every feed, or why it could not (`error`)."""

    voter: str
    answers: tuple[Outputs, ...] | None
    error: str = ""

    @property
    def answered(self) -> bool:
        return self.answers is not None


@dataclass(frozen=True)
class Truth:
    """The consensus over `votes`: `majority` names the voters whose answer it is (empty
    when undecided), `answers` that answer per feed (None when undecided)."""

    votes: tuple[Vote, ...]
    majority: tuple[str, ...]
    answers: tuple[Outputs, ...] | None
    # voters outvoted by the majority, each with how it differed
    dissent: tuple[tuple[str, str], ...] = ()

    @property
    def decided(self) -> bool:
        return self.answers is not None

    @property
    def judges(self) -> str:
        """Who decided, in words: 'onnxruntime (...) and onnx.reference'."""
        if self.decided:
            return " and ".join(self.majority)
        answered = [v.voter for v in self.votes if v.answered]
        return f"no majority ({', '.join(answered) or 'no implementation'} answered)"

    def who_said_what(self) -> str:
        said = []
        for vote in self.votes:
            if not vote.answered:
                said.append(f"{vote.voter}: no answer ({vote.error})")
                continue
            others = [other.voter for other in self.votes
                      if other is not vote and other.answered
                      and agree_all(vote.answers, other.answers).ok]  # type: ignore[arg-type]
            said.append(f"{vote.voter}: " + (f"agrees with {', '.join(others)}" if others
                                             else "agrees with no other"))
        return "; ".join(said)

    def summary(self) -> str:
        if not self.decided:
            return f"undecided ({self.who_said_what()})"
        dissent = "; ".join(f"{voter} outvoted: {why}" for voter, why in self.dissent)
        return f"decided by {self.judges}" + (f"; {dissent}" if dissent else "")


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_error: float
    why: str = ""


def agree_all(got: Sequence[Outputs], want: Sequence[Outputs]) -> Comparison:
    """Agreement on every feed, with the largest error over them and the first difference."""
    worst = 0.0
    for index, (have, expected) in enumerate(zip(got, want, strict=True)):
        verdict = agree(have, expected, scaled=True)  # large outputs accumulate more
        worst = max(worst, verdict.max_abs_error)
        if not verdict:
            feed = f" on input set {index}" if len(want) > 1 else ""
            return Comparison(False, worst, verdict.why.replace(
                "the reference", "the other") + feed)
    return Comparison(True, worst)


@dataclass
class Oracle:
    """Asks the voters for the truth. `exclude` leaves out implementations of the backends
    being judged, so no backend is its own third vote; `voters` may narrow the list (tests)."""

    exclude: tuple[str, ...] = ()
    voters: tuple[Voter, ...] = VOTERS
    _available: dict[str, bool] = field(default_factory=dict, repr=False)

    def truth(self, model: onnx.ModelProto, feeds: Sequence[Mapping[str, Any]]) -> Truth:
        """The consensus of `model`'s outputs on each of `feeds`."""
        usable = [v for v in self.voters if self._usable(v)]
        votes = [_vote(v, model, feeds) for v in usable[:FIRST]]
        truth = _decide(votes)
        for voter in usable[FIRST:]:
            if truth.decided and len(truth.majority) * 2 > len(votes):
                break
            votes.append(_vote(voter, model, feeds))
            truth = _decide(votes)
        return truth

    def _usable(self, voter: Voter) -> bool:
        kind = voter.kind
        if kind in self.exclude and voter.target != VOTERS[0].target:
            return False  # unoptimised ONNX Runtime stays: it shares no graph rewrites
        if kind not in self._available:
            from tessera import backends

            try:
                self._available[kind] = bool(backends.get(kind).is_available().ok)
            except Exception:  # an unknown or broken plugin is no voter
                self._available[kind] = False
        return self._available[kind]


@dataclass(frozen=True)
class Answers:
    """The fp32 answers to judge against, one per feed, and who gave them: the consensus,
    or, where it is undecided, the first implementation that answered, saying so."""

    outputs: tuple[Outputs, ...]
    judges: str
    truth: Truth


def answers(model: onnx.ModelProto, feeds: Sequence[Mapping[str, Any]],
            oracle: Oracle | None = None) -> Answers:
    """The answers an accuracy budget or a check is measured against. Raises the first
    voter's error where none could answer."""
    from tessera.errors import ExecutionError

    truth = (oracle or Oracle()).truth(model, feeds)
    if truth.answers is not None:
        return Answers(truth.answers, f"the consensus of {truth.judges}", truth)
    first = next((v for v in truth.votes if v.answers is not None), None)
    if first is None or first.answers is None:
        raise ExecutionError(f"no implementation could compute the model's fp32 answers: "
                             f"{truth.who_said_what()}")
    return Answers(first.answers, f"{first.voter} alone (no majority: "
                                  f"{truth.who_said_what()})", truth)


@dataclass(frozen=True)
class ReferenceAnswers:
    """The trusted fp32 answers on a model's validation samples: `feeds` are those samples'
    inputs in order, `outputs` the answer to each (by output name), `judges` who gave them
    in words, and `truth` the consensus behind them."""

    feeds: tuple[Mapping[str, np.ndarray], ...]
    outputs: tuple[Outputs, ...]
    judges: str
    truth: Truth


def reference_answers(model: Model, samples: Samples, oracle: Oracle | None = None
                      ) -> ReferenceAnswers:
    """The answers that an accuracy budget, `tessera bench` and the precision search judge
    a plan by: the whole model's consensus answers on the validation half of `samples`
    (`Samples.split`), or where no majority exists, the first voter that answered, saying
    so in `judges`. Raises ExecutionError where no voter could answer."""
    _, validation = samples.split()
    feeds = tuple(validation)
    given = answers(model.proto, feeds, oracle)
    return ReferenceAnswers(feeds, given.outputs, given.judges, given.truth)


def _vote(voter: Voter, model: onnx.ModelProto, feeds: Sequence[Mapping[str, Any]]) -> Vote:
    from tessera import backends

    try:
        # check: a voter never answers where its own supports() knows it deviates
        compiled = backends.get(voter.kind).compile(model, voter.target)
        answers = tuple(compiled.run(dict(feed)) for feed in feeds)
    except Exception as err:  # a voter that cannot answer abstains, saying why
        return Vote(voter.label, None, typed_line(err, 200))
    return Vote(voter.label, answers)


def _decide(votes: Sequence[Vote]) -> Truth:
    """The largest group of voters that agree with each other, when it has at least two
    members and no other group is as large."""
    answered = [v for v in votes if v.answered]
    groups: list[list[Vote]] = []
    for vote in answered:
        for group in groups:
            if agree_all(vote.answers, group[0].answers).ok:  # type: ignore[arg-type]
                group.append(vote)
                break
        else:
            groups.append([vote])
    groups.sort(key=len, reverse=True)
    if not groups or len(groups[0]) < 2 or (len(groups) > 1 and len(groups[1]) == len(groups[0])):
        return Truth(tuple(votes), (), None)
    winners = groups[0]
    dissent = tuple((v.voter, agree_all(v.answers, winners[0].answers).why)  # type: ignore[arg-type]
                    for group in groups[1:] for v in group)
    return Truth(tuple(votes), tuple(v.voter for v in winners), winners[0].answers, dissent)


__all__ = [
    "FIRST",
    "VOTERS",
    "Answers",
    "Comparison",
    "Oracle",
    "Outputs",
    "ReferenceAnswers",
    "Truth",
    "Vote",
    "Voter",
    "agree_all",
    "answers",
    "reference_answers",
]
