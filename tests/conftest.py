import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every cache tessera writes (costs, remembered plans, compiled partitions, file memos)
    goes to a directory of this test run, never to the user's own cache. Tests that need a
    cache of their own set TESSERA_CACHE or TESSERA_COST_DB themselves."""
    root = tmp_path_factory.mktemp("tessera-cache")
    saved = {k: os.environ.get(k) for k in ("TESSERA_CACHE", "TESSERA_COST_DB")}
    os.environ["TESSERA_CACHE"] = str(root)
    os.environ.pop("TESSERA_COST_DB", None)
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def _precision_search_unbounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's precision search is not cut short by time: precision-time=auto gives it as
    long as the fp32 plan took, a second or two on the test models, so what it tries would
    depend on the machine's speed. Tests of the time limit set precision-time themselves."""
    import math

    from tessera.placement.judge import _precision

    monkeypatch.setattr(_precision, "auto_seconds", lambda before: math.inf)
