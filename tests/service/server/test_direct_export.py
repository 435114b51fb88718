"""The owner's exports of its buffer: when a client is told to ask again (no Ray)."""

from __future__ import annotations

import torch

from rbdata import LazyTensorStorage, ReplayBuffer
from rbdata.service.server.direct import DirectExport


class _WordedBuffer(ReplayBuffer):
    """A buffer whose reasons are worded otherwise: the retry must not read their text."""

    def export_reason(self) -> str | None:
        reason = super().export_reason()
        return None if reason is None else "nicht exportierbar"


def test_an_empty_buffer_is_asked_again_whatever_its_reason_says() -> None:
    rb = _WordedBuffer(storage=LazyTensorStorage(8))
    assert DirectExport().handle(rb, True) == (None, True)


def test_a_buffer_ruled_out_for_good_is_not_asked_again() -> None:
    rb = _WordedBuffer(storage=LazyTensorStorage(8), consume_after_n_samples=1)
    rb.extend(torch.arange(4))
    assert rb.export_reason() is not None
    assert DirectExport().handle(rb, True) == (None, False)


def test_an_owner_that_offers_no_maps_never_asks_again() -> None:
    assert DirectExport().handle(ReplayBuffer(storage=LazyTensorStorage(8)), False) == (None, False)
