"""The accuracy budget (parsed spec, round trip, errors naming the part) and the metrics of
the accuracy report, on hand-made outputs whose values are known."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.config import AccuracyBudget, CompilationConfig
from tessera.config._accuracy import METRICS, AccuracyReport, Bound, accuracy_of
from tessera.errors import ConfigError, InputError


def _limit(metric: str) -> st.SearchStrategy[float]:
    _, low, high = METRICS[metric]
    return st.floats(low, min(high, 1e30), allow_nan=False)


budgets = st.lists(st.sampled_from(list(METRICS)), min_size=1, max_size=4, unique=True).flatmap(
    lambda names: st.tuples(*(_limit(n).map(lambda x, n=n: Bound(n, x)) for n in names))
).map(AccuracyBudget)


@given(budgets)
def test_a_budget_parses_back_from_its_string(budget: AccuracyBudget) -> None:
    assert AccuracyBudget.parse(str(budget)) == budget
    assert CompilationConfig.create("reference", accuracy=str(budget)).options.accuracy == budget


def test_the_spec_reads_as_written() -> None:
    budget = AccuracyBudget.parse(" cosine >= 0.999, top1>=0.99,max-abs<=1e-3")
    assert budget.bounds == (Bound("cosine", 0.999), Bound("top1", 0.99), Bound("max-abs", 1e-3))
    assert str(budget) == "cosine>=0.999,top1>=0.99,max-abs<=0.001"


@pytest.mark.parametrize(("spec", "words"), [
    ("cosin>=0.9", ["part 'cosin>=0.9'", "unknown metric 'cosin'", "did you mean 'cosine'",
                    "max-abs<=X"]),
    ("cosine<=0.9", ["part 'cosine<=0.9'", "cosine>=X"]),
    ("top1>=high", ["part 'top1>=high'", "'high' is not a number"]),
    ("top1>=1.5", ["top1's bound must lie in [0, 1]"]),
    ("max-abs<=-1", ["max-abs's bound must lie in [0, inf]"]),
    ("max-rel<=nan", ["max-rel's bound"]),
    ("cosine>=0.9,,top1>=0.5", ["part ''", "METRIC<=X"]),
    ("cosine=0.9", ["part 'cosine=0.9'", "METRIC<=X or METRIC>=X"]),
    ("cosine>=0.9,cosine>=0.8", ["cosine is given twice"]),
])
def test_a_bad_spec_names_the_part_and_the_valid_forms(spec: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        CompilationConfig.create("reference", accuracy=spec)
    message = str(caught.value)
    assert "option 'accuracy'" in message
    for word in words:
        assert word in message


def test_the_option_enters_the_cache_key_and_round_trips_through_json() -> None:
    plain = CompilationConfig.create("reference")
    budgeted = CompilationConfig.create("reference", accuracy="cosine>=0.999")
    assert plain.options.accuracy is None
    assert CompilationConfig.create("reference", accuracy="none").options.accuracy is None
    assert plain.cache_key() != budgeted.cache_key()
    again = CompilationConfig.from_json(budgeted.to_json())
    assert again.options.accuracy == AccuracyBudget.parse("cosine>=0.999")
    assert again.cache_key() == budgeted.cache_key()


def test_the_metrics_measure_known_differences() -> None:
    want = [{"y": np.array([[1.0, 2.0, 4.0], [3.0, 1.0, 0.0]], np.float32),
             "ids": np.array([1, 2], np.int64)},
            {"y": np.array([[0.0, 8.0, 1.0], [5.0, 5.5, 0.0]], np.float32),
             "ids": np.array([3, 4], np.int64)}]
    got = [{"y": want[0]["y"] + np.float32(0.5), "ids": want[0]["ids"]},
           {"y": np.array([[0.0, 8.0, 1.0], [6.0, 5.5, 0.0]], np.float32),
            "ids": np.array([3, 5], np.int64)}]
    budget = AccuracyBudget.parse("top1>=0.9,max-abs<=1")
    report = accuracy_of(got, want, budget)
    assert report.samples == 2
    assert report.value("max-abs", "y") == 1.0
    assert report.value("max-rel", "y") == pytest.approx(1.0 / 8.0)
    first = np.dot(got[0]["y"].ravel(), want[0]["y"].ravel()) / (
        np.linalg.norm(got[0]["y"]) * np.linalg.norm(want[0]["y"]))
    second = np.dot(got[1]["y"].ravel(), want[1]["y"].ravel()) / (
        np.linalg.norm(got[1]["y"]) * np.linalg.norm(want[1]["y"]))
    assert report.value("cosine", "y") == pytest.approx(min(first, second))
    assert report.value("top1", "y") == 0.75  # the last row's argmax moved
    assert report.value("top1", "ids") == 1.0  # argmax of [3, 5] is still the last
    assert report.value("max-abs", "ids") == 1.0
    assert report.met is False
    worst = report.worst
    assert worst is not None and (worst.bound.metric, worst.output) == ("top1", "y")
    assert "top1 of output 'y' is 0.75" in str(worst)
    assert [(m.bound.metric, m.output) for m in report.misses] == [("top1", "y")]


def test_nan_agrees_only_with_nan_and_a_shape_change_is_the_worst() -> None:
    want = [{"y": np.array([np.nan, 1.0], np.float32)}]
    same = accuracy_of([{"y": np.array([np.nan, 1.0], np.float32)}], want)
    assert same.value("max-abs", "y") == 0.0 and same.value("cosine", "y") == 1.0
    broken = accuracy_of([{"y": np.array([0.0, 1.0], np.float32)}], want)
    assert broken.value("max-abs", "y") == float("inf")
    reshaped = accuracy_of([{"y": np.zeros(3, np.float32)}], want,
                           AccuracyBudget.parse("cosine>=0"))
    assert reshaped.value("cosine", "y") == -1.0 and reshaped.met is False
    with pytest.raises(InputError, match="1 results to compare with 2"):
        accuracy_of([{"y": want[0]["y"]}], want * 2)


def test_the_report_round_trips_through_plain_json() -> None:
    want = [{"y": np.array([1.0, 2.0], np.float32)}]
    report = accuracy_of([{"y": np.array([1.0, 2.5], np.float32)}], want,
                     AccuracyBudget.parse("max-abs<=0.1"))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["met"] is False and data["worst"] == {"metric": "max-abs", "output": "y",
                                                       "value": 0.5}
    assert AccuracyReport.from_dict(data) == report
    unbudgeted = accuracy_of(want, want)
    assert unbudgeted.met is None and unbudgeted.worst is None
    assert AccuracyReport.from_dict(unbudgeted.to_dict()) == unbudgeted
