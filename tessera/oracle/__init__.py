"""The one judge of answers: the consensus of independent implementations (ONNX Runtime
unoptimised, onnx.reference, and OpenVINO at f32 or torch where those two disagree). The
numeric guard, the accuracy budget, `run --check`, `tessera bench` and `bench/` all ask it;
none of them takes one implementation as the truth. The answers a plan's accuracy on the
user's samples is judged by come from one place, `reference_answers`."""

from __future__ import annotations

from tessera.oracle._consensus import (
    VOTERS,
    Answers,
    Oracle,
    ReferenceAnswers,
    Truth,
    Vote,
    Voter,
    agree_all,
    answers,
    reference_answers,
)
from tessera.oracle._judge import (
    AGREED,
    DISAGREED,
    UNDECIDED,
    Disagreement,
    Narrowed,
    Verdict,
    disagreement,
    judge,
    narrow,
)

__all__ = ["AGREED", "DISAGREED", "UNDECIDED", "VOTERS", "Answers", "Disagreement", "Narrowed",
           "Oracle", "ReferenceAnswers", "Truth", "Verdict", "Vote", "Voter", "agree_all",
           "answers", "disagreement", "judge", "narrow", "reference_answers"]
