"""The one judge of answers: the consensus of independent implementations (ONNX Runtime
unoptimised, onnx.reference, and OpenVINO at f32 or torch where those two disagree). The
numeric guard, the accuracy budget, `run --check`, `tessera bench` and `bench/` all ask it;
none of them takes one implementation as the truth."""

from __future__ import annotations

from tessera.oracle._consensus import (
    VOTERS,
    Answers,
    Oracle,
    Truth,
    Vote,
    Voter,
    agree_all,
    answers,
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
           "Oracle", "Truth", "Verdict", "Vote", "Voter", "agree_all", "answers", "disagreement",
           "judge", "narrow"]
