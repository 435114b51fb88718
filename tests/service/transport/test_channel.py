"""The distributed channel's bookkeeping: each payload layout travels once, then by number."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rbdata.service.transport.channel import LayoutNumbers
from rbdata.service.transport.codec import encode, pack_into


def test_layouts_travel_once_per_channel() -> None:
    sender, receiver = LayoutNumbers(), LayoutNumbers()
    payload = encode(TensorDict({"a": torch.zeros(4)}, [4]))
    packed = pack_into(payload, torch.empty(payload.nbytes, dtype=torch.uint8))
    first, second = sender.outgoing(packed, 16), sender.outgoing(packed, 16)
    assert first.layout is not None and second.layout is None
    assert second.layout_id == first.layout_id
    receiver.incoming(first)
    assert receiver.incoming(second).tree == packed.tree
