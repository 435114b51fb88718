"""Shared pytest configuration."""

import pytest
from hypothesis import settings

settings.register_profile("ci", deadline=None, max_examples=50)
settings.load_profile("ci")


@pytest.fixture
def check_servable():
    """The ServableBuffer conformance checks (``tests/protocol_conformance.py``)."""
    from protocol_conformance import check_servable

    return check_servable
