"""attach_ray_service called on its own: its options are checked before anything starts."""

from __future__ import annotations

import re

import pytest

from rbdata.service.attach import OPTION_KEYS, attach_ray_service
from rbdata.service.options import OPTION_KEYS as DECLARED


def test_attach_exports_the_one_declaration():
    assert OPTION_KEYS is DECLARED


def test_an_unknown_option_is_refused_before_anything_starts():
    expected = f"service_backend_options accepts only {sorted(OPTION_KEYS)}, got ['bogus']."
    with pytest.raises(TypeError, match=re.escape(expected)):
        # no buffer and no Ray: the check comes first
        attach_ray_service(None, None, {"bogus": 1, "shards": 1}, "auto", None)
