"""Reading torchrl 0.14's sampler ``state_dict`` layouts into rbdata's.

torchrl's ``SamplerWithoutReplacement`` (and ``SliceSamplerWithoutReplacement``) save
``len_storage``, ``_sample_list`` (what the pass has still to hand out), ``drop_last`` and
``_ran_out``; ``RandomSampler`` and ``SliceSampler`` save nothing. These load. What rbdata
cannot read raises ValueError naming it: torchrl's ``PrioritizedSampler`` keeps its
priorities in compiled segment trees (``_sum_tree``, ``_min_tree``), its
``ConsumingSampler`` in its own counters.
"""

from __future__ import annotations

from typing import Any

import torch

_WITHOUT_REPLACEMENT = {"len_storage", "_sample_list", "drop_last", "_ran_out"}
_PRIORITIZED = {"_sum_tree", "_min_tree"}
_CONSUMING = {"max_sample_count", "_sample_count", "_live_mask", "_known_storage_len"}


def _plain(value: Any) -> Any:
    """A 0-d tensor (how torchrl's memmap dumps hold scalars) as its Python value."""
    return value.item() if isinstance(value, torch.Tensor) and value.ndim == 0 else value


def sampler_state(state: dict[str, Any], sampler: Any) -> dict[str, Any]:
    """The rbdata state for ``sampler`` from torchrl's ``state`` (rbdata's own: unchanged).

    Raises:
        ValueError: naming the torchrl entries this rbdata cannot read, or a torchrl
            without-replacement state given to another kind of sampler.
    """
    keys = set(state)
    if keys & _PRIORITIZED:
        raise ValueError(
            f"a torchrl PrioritizedSampler state is not read: its priorities are in "
            f"{sorted(keys & _PRIORITIZED)}, torchrl's compiled segment trees, which rbdata "
            "cannot read; set them with update_priority after loading the rest."
        )
    if keys & _CONSUMING:
        raise ValueError(
            f"a torchrl ConsumingSampler state ({sorted(keys & _CONSUMING)}) is not read; "
            "rbdata consumes through consume_after_n_samples."
        )
    if "_sample_list" not in keys or not keys <= _WITHOUT_REPLACEMENT:
        return state
    if "perm" not in sampler.state_dict():  # rbdata's without-replacement samplers save it
        raise ValueError(
            f"a torchrl SamplerWithoutReplacement state ({sorted(keys)}) given to a "
            f"{type(sampler).__name__}."
        )
    drop_last = bool(_plain(state.get("drop_last", sampler.drop_last)))
    if drop_last != sampler.drop_last:
        raise ValueError(
            f"the torchrl sampler state has drop_last={drop_last}; this sampler has "
            f"drop_last={sampler.drop_last}."
        )
    remaining = state["_sample_list"]
    if remaining is not None:
        remaining = torch.as_tensor(remaining, dtype=torch.long).reshape(-1).clone()
    ran_out = bool(_plain(state.get("_ran_out", False)))
    length = state.get("len_storage")
    return {
        "perm": None if remaining is None or not remaining.numel() else remaining,
        "cursor": 0,
        "ran_out": ran_out,
        # a pass torchrl drew at the end of the last one is drawn again if the storage grew
        "drawn_ahead": int(_plain(length)) if ran_out and length is not None else None,
    }
