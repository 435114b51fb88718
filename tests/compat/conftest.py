"""Differential tests against torchrl 0.14.1 (run by ``scripts/compat.sh``).

They import ``torchrl`` and ``rbdata`` in the same process. In an environment
without torchrl (rbdata's own venv) nothing here is collected at all.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("torchrl") is None:
    collect_ignore_glob = ["*"]
else:
    from ._libs import LIBS, load, torchrl_prioritized_available

    def pytest_configure(config: pytest.Config) -> None:
        """torchrl warns on the scripted edge cases (batch-size overrides, lazy loads)."""
        config.addinivalue_line("filterwarnings", "ignore::UserWarning:torchrl.*")
        # rbdata's copy of torchrl's warning, on the scripted batch-size overrides
        config.addinivalue_line("filterwarnings", "ignore:Got conflicting batch_sizes:UserWarning")

    @pytest.fixture(params=LIBS)
    def lib(request: pytest.FixtureRequest):
        """One of the two libraries (the test runs once per library)."""
        return load(request.param)

    @pytest.fixture
    def both():
        """Both libraries, as ``{"torchrl": ns, "rbdata": ns}``."""
        return {name: load(name) for name in LIBS}

    @pytest.fixture(params=LIBS)
    def prio_lib(request: pytest.FixtureRequest):
        """A library whose prioritized samplers work here (torchrl's need its sum tree).

        With torch 2.13 torchrl's compiled sum tree does not load: the torchrl run of
        a prioritized test is then skipped and rbdata is checked against the formula
        (the same assertion the torchrl run checks where it loads).
        """
        if request.param == "torchrl" and not torchrl_prioritized_available():
            pytest.skip("torchrl's compiled sum tree does not load in this venv (torch 2.13)")
        return load(request.param)

    @pytest.fixture
    def prio_both(both):
        """Both libraries for prioritized differential checks.

        torchrl's prioritized samplers need its compiled sum tree, which does not
        load against torch 2.13; the prioritized tests that need it then compare
        rbdata with the documented formula only (``test_prioritized_stats``).
        """
        if not torchrl_prioritized_available():
            pytest.skip("torchrl's compiled sum tree does not load in this venv")
        return both
