"""torchrl's outcome of a script, emulated for prioritized samplers where torchrl's cannot load.

torchrl 0.14.1's prioritized samplers need its compiled sum tree, which does not
load against torch 2.13. There the reference outcome of a prioritized
configuration is torchrl's outcome of the same configuration with a uniform
sampler, plus what torchrl documents (and does, measured on torch 2.14) for
prioritized draws: the info carries ``priority_weight`` (float32, one per row)
besides ``index``, and TensorDict samples carry it as an entry. Steps whose
outcome depends on the drawn priorities are left out of the emulation.
"""

from __future__ import annotations

import copy
from typing import Any

from ._libs import torchrl_prioritized_available

#: steps that depend on what a prioritized sampler draws with no priority written yet
PRIORITY_DEPENDENT_STEPS = ("sample_empty",)

_SUBSTITUTE_BUFFER = {
    "PrioritizedReplayBuffer": "ReplayBuffer",
    "TensorDictPrioritizedReplayBuffer": "TensorDictReplayBuffer",
}
_WEIGHT = "priority_weight"


def is_prioritized(buffer: str, sampler: str | None) -> bool:
    """Whether this configuration samples by priority."""
    return buffer in _SUBSTITUTE_BUFFER or sampler == "prioritized"


def emulated(buffer: str, sampler: str | None) -> bool:
    """Whether torchrl's outcome for this configuration must be emulated in this venv."""
    return is_prioritized(buffer, sampler) and not torchrl_prioritized_available()


def substitute(buffer: str, sampler: str | None) -> tuple[str, str | None]:
    """The uniform configuration torchrl runs in place of a prioritized one."""
    if buffer in _SUBSTITUTE_BUFFER:
        return _SUBSTITUTE_BUFFER[buffer], "random"
    return buffer, "random"


def as_prioritized(steps: dict[str, Any], buffer: str) -> dict[str, Any]:
    """The outcome of the uniform substitute, turned into the documented prioritized one."""
    out = copy.deepcopy(steps)
    for name in PRIORITY_DEPENDENT_STEPS:
        out.pop(name, None)
    if out.get("construct") in _SUBSTITUTE_BUFFER.values():
        out["construct"] = buffer
    info = out.get("sample_info")
    if isinstance(info, dict):
        rows = info["info"][1]["index"][1]
        info["info_keys"] = sorted([*info["info_keys"], _WEIGHT])
        info["info"][1][_WEIGHT] = ("Tensor", rows, "torch.float32")
        if buffer == "TensorDictPrioritizedReplayBuffer":
            info["data"] = _with_weight(info["data"])
    if buffer == "TensorDictPrioritizedReplayBuffer":
        out["sample"] = _with_weight(out.get("sample"))
        if isinstance(out.get("sample_keys"), list):
            out["sample_keys"] = sorted([*out["sample_keys"], _WEIGHT])
        if isinstance(out.get("iterate"), list):
            out["iterate"] = [_with_weight(b) for b in out["iterate"]]
        for name in ("load_state_dict", "dumps_loads"):
            if isinstance(out.get(name), dict):
                out[name]["sample"] = _with_weight(out[name]["sample"])
    return out


def _with_weight(summary: Any) -> Any:
    """A TensorDict summary with the ``priority_weight`` entry a prioritized sample has."""
    if isinstance(summary, tuple) and summary and summary[0] == "TensorDict":
        kind, batch, entries = summary
        entries = dict(entries)
        entries[_WEIGHT] = ("Tensor", batch, "torch.float32")
        return (kind, batch, dict(sorted(entries.items())))
    return summary
