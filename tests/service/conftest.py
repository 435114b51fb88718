"""Fixtures of the Ray service tests: one local cluster per test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray cluster (2 CPUs) shared by the tests of one module."""
    ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")
    # "local": a cluster of its own, even while another process's `ray start` cluster runs
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
