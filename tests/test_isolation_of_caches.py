"""The root fixture keeps every test away from the user's own cache."""

import os
from pathlib import Path

from tessera._private.cache import cache_dir


def test_the_cache_of_a_test_run_is_its_own(tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    root = Path(os.environ["TESSERA_CACHE"])
    assert root.is_relative_to(tmp_path_factory.getbasetemp())
    assert cache_dir("costs").is_relative_to(root)
    # a test may point the cost database elsewhere, but only inside this run's directory
    cost_db = os.environ.get("TESSERA_COST_DB")
    assert cost_db is None or Path(cost_db).is_relative_to(tmp_path_factory.getbasetemp())
