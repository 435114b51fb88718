"""The documented differences a fuzzer program can reach (docs/torchrl-compat.md).

:func:`known` names the row of the migration page a diverging step falls under,
or returns None for a new divergence. A program stops being compared at its
first documented divergence: what follows starts from states the page already
says differ. Each rule is ``(reason, predicate)``; the predicate gets a
:class:`Step`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._fuzz_program import LIST_STORAGES, Config

#: the list storages (``"default"``: no storage given, the buffer's ``ListStorage(1000)``)
_LISTS = (*LIST_STORAGES, "default")

#: stats() entries rbdata adds to torchrl's (deliberate)
EXTRA_STATS = ("skipped_priority_updates", "capacity_bytes", "resident_bytes")


def normalized(op: tuple[Any, ...], outcome: Any) -> Any:
    """``outcome`` with what rbdata deliberately adds left out."""
    if op[0] == "stats" and isinstance(outcome, dict):
        return {k: v for k, v in outcome.items() if k not in EXTRA_STATS}
    return outcome


@dataclass(frozen=True)
class Step:
    """One diverging step: the program's configuration, the operation, both outcomes."""

    cfg: Config
    op: tuple[Any, ...]
    before: Any  # the state both libraries agreed on before the step
    theirs: Any  # torchrl's outcome
    ours: Any  # rbdata's outcome
    our_state: Any
    their_state: Any = None
    mismatched: bool = False  # mismatched data (another shape or dtype) was written before

    @property
    def name(self) -> str:
        return str(self.op[0])

    def outside(self, index: int) -> bool:
        """Whether ``index`` lies outside the items written before the step."""
        size = self.before["len"] if isinstance(self.before, dict) else 0
        return not -size <= index < size


def raises(outcome: Any, *types: str) -> bool:
    """Whether ``outcome`` is a raised exception (of one of ``types``, if given)."""
    return (
        isinstance(outcome, tuple)
        and len(outcome) == 2
        and outcome[0] == "raises"
        and (not types or outcome[1] in types)
    )


def _kinds(outcome: Any) -> Any:
    """The kinds, shapes and dtypes of an outcome, without its contents."""
    if isinstance(outcome, tuple) and outcome and outcome[0] == "with_info":
        return ("with_info", outcome[1][0], outcome[2])
    if isinstance(outcome, list):
        return [_kinds(o) for o in outcome]
    if isinstance(outcome, tuple) and len(outcome) == 2 and not raises(outcome):
        return outcome[0]
    return outcome


def _same_kinds(s: Step) -> bool:
    return not raises(s.theirs) and _kinds(s.theirs) == _kinds(s.ours)


Rule = tuple[str, Callable[[Step], bool]]

#: (reason: the migration-page row, predicate), first match wins
RULES: tuple[Rule, ...] = (
    (
        "a mismatched write is refused before writing (torchrl: RuntimeError, writes part)",
        lambda s: (
            s.name in ("extend_bad", "extend", "add", "setitem")
            and raises(s.theirs, "RuntimeError")
            and raises(s.ours, "ValueError", "TypeError", "KeyError")
        ),
    ),
    (
        "a mismatched write is refused before writing (error types)",
        lambda s: s.name == "extend_bad" and raises(s.theirs) and raises(s.ours),
    ),
    (
        "extend of zero items: a no-op on ndim=1 (ValueError on ndim>1; torchrl raises)",
        lambda s: s.name == "extend" and s.op[1] == 0 and raises(s.theirs),
    ),
    (
        "iterating an empty buffer yields nothing",
        lambda s: s.name == "iterate" and raises(s.theirs, "RuntimeError") and s.ours == [],
    ),
    (
        "state_dict and dumps round-trip every storage and data kind (torchrl raises or converts)",
        lambda s: s.name in ("state_dict", "dumps") and s.ours == s.before,
    ),
    (
        "state_dict and dumps round-trip every storage and data kind (torchrl raises or converts)",
        lambda s: (
            s.name in ("storage", "writer")
            and s.op[1] in ("state_dict", "dumps")
            and raises(s.theirs)
            and not raises(s.ours)
        ),
    ),
    (
        "consume_after_n_samples: items written through rb.writer itself are not live",
        lambda s: s.name == "writer" and s.op[1] in ("add", "extend") and s.cfg.consume is not None,
    ),
    (
        "an extend of more items than the storage holds keeps the last ones whole (torchrl's "
        "write through repeated slots can tear rows: leaves of different items in one row)",
        lambda s: (
            s.name == "extend"
            and s.op[1] > s.cfg.max_size
            and s.theirs == s.ours
            and isinstance(s.their_state, dict)
            and isinstance(s.our_state, dict)
            and {k: v for k, v in s.their_state.items() if k != "rows"}
            == {k: v for k, v in s.our_state.items() if k != "rows"}
        ),
    ),
    (
        "TensorDict buffers accept data that is not a TensorDict (a list)",
        lambda s: (
            s.name == "extend"
            and s.cfg.buffer == "TensorDictReplayBuffer"
            and s.op[2] == "list"
            and raises(s.theirs, "ValueError")
        ),
    ),
    (
        "update_priority of slots never written: ValueError",
        lambda s: (
            s.name == "update_priority"
            and not raises(s.theirs)
            and raises(s.ours, "ValueError")
            and any(s.outside(i) for i in s.op[1])
        ),
    ),
    (
        "rb[i] = x outside the written items (rbdata: IndexError, or len grows)",
        lambda s: s.name == "setitem" and s.op[2] == "raw" and s.outside(s.op[1]),
    ),
    (
        "rb[i] = x with a transform: torchrl raises TypeError (its inverse of a callable)",
        lambda s: (
            s.name == "setitem" and s.cfg.transform is not None and raises(s.theirs, "TypeError")
        ),
    ),
    (
        "rb[-i] = x: torchrl counts -i from the capacity, rbdata from len",
        lambda s: s.name == "setitem" and s.op[2] == "raw" and s.op[1] < 0,
    ),
    (
        "consume_after_n_samples: the same distribution, other draws for a seed",
        lambda s: (
            s.name in ("sample", "iterate")
            and s.cfg.consume is not None
            and not raises(s.theirs)
            and not raises(s.ours)
        ),
    ),
    (
        "ndim>1 storages: the same distribution over cells, another cell order for a seed",
        lambda s: s.name in ("sample", "iterate") and s.cfg.ndim > 1 and _same_kinds(s),
    ),
    (
        "rb[index] on ndim>1 storages: rbdata indexes storage dim 0, torchrl dim dim_extend",
        lambda s: (
            (s.name == "getitem" and s.cfg.ndim > 1 and s.op[1] != ("slice", None, None))
            or (s.name == "setitem" and s.cfg.ndim > 1)
        ),
    ),
    (
        "a write of another dtype: TypeError (torchrl casts on add and rb[i] = x)",
        lambda s: (
            s.name in ("add", "setitem") and not raises(s.theirs) and raises(s.ours, "TypeError")
        ),
    ),
    (
        "a write that does not match the stored shape or dtype: refused (torchrl broadcasts)",
        lambda s: (
            s.mismatched
            and s.name in ("add", "setitem", "extend")
            and not raises(s.theirs)
            and raises(s.ours, "TypeError", "ValueError")
        ),
    ),
    (
        "lazily stacked (ragged) data in list storages",
        lambda s: s.mismatched and s.cfg.storage in _LISTS,
    ),
    (
        "writes to an ndim>1 TensorDict buffer: torchrl RuntimeError (its index entry)",
        lambda s: (
            s.name in ("add", "extend")
            and s.cfg.ndim > 1
            and s.cfg.buffer == "TensorDictReplayBuffer"
            and raises(s.theirs, "RuntimeError")
            and not raises(s.ours)
        ),
    ),
    (
        "TensorDict writers given a list of TensorDicts: torchrl AttributeError",
        lambda s: (
            s.name == "extend"
            and s.op[2] == "list"
            and (s.cfg.writer or "").startswith("TensorDict")
            and raises(s.theirs, "AttributeError")
        ),
    ),
    (
        "an ndim>1 lazy storage's len and cursor: torchrl's len grows past the capacity",
        lambda s: (
            s.cfg.ndim > 1
            and isinstance(s.their_state, dict)
            and isinstance(s.our_state, dict)
            and s.their_state["rows"] == s.our_state["rows"]
        ),
    ),
    (
        "writes through a callable transform on ndim>1 storages: torchrl RuntimeError",
        lambda s: (
            s.name in ("add", "extend")
            and s.cfg.ndim > 1
            and s.cfg.transform is not None
            and raises(s.theirs, "RuntimeError")
            and not raises(s.ours)
        ),
    ),
    (
        "an ndim>1 extend that wraps around: torchrl IndexError (and garbage rows)",
        lambda s: (
            s.name in ("extend", "extend_bad")
            and s.cfg.ndim > 1
            and raises(s.theirs, "IndexError")
            and not raises(s.ours)
        ),
    ),
    (
        "stats() capacity of an ndim>1 storage first written by add: torchrl counts a feature dim",
        lambda s: (
            s.name == "stats"
            and s.cfg.ndim > 1
            and isinstance(s.theirs, dict)
            and isinstance(s.ours, dict)
            and {k: v for k, v in s.theirs.items() if k not in ("capacity", "utilization")}
            == {k: v for k, v in s.ours.items() if k not in ("capacity", "utilization")}
        ),
    ),
    (
        "consume_after_n_samples: which consumed slot a write reuses first",
        lambda s: (
            s.name in ("add", "extend")
            and s.cfg.consume is not None
            and not raises(s.theirs)
            and _kinds(s.theirs) == _kinds(s.ours)
        ),
    ),
    (
        "TensorDictMaxValueWriter: which evicted slot each incoming item of a batch takes",
        lambda s: (
            s.name in ("extend", "extend_bad")
            and s.cfg.writer == "TensorDictMaxValueWriter"
            and _kinds(s.theirs) == _kinds(s.ours)
        ),
    ),
    (
        "slice samplers over list storages and TensorStorage: the index entry, short trajectories",
        lambda s: (
            s.name in ("sample", "iterate")
            and s.cfg.sampler == "slice"
            and s.cfg.storage in (*_LISTS, "tensor")
        ),
    ),
    (
        "slice samplers over a storage that wrapped around: other slices for a seed",
        lambda s: (
            s.name in ("sample", "iterate")
            and s.cfg.sampler == "slice"
            and isinstance(s.before, dict)
            and s.before["write_count"] > s.cfg.max_size
        ),
    ),
    (
        "TensorDictMaxValueWriter over a pre-filled TensorStorage: torchrl fills from slot 0",
        lambda s: (
            s.name in ("add", "extend")
            and s.cfg.writer == "TensorDictMaxValueWriter"
            and s.cfg.storage == "tensor"
        ),
    ),
    (
        "TensorDictMaxValueWriter.add of an item ranked too low returns -1 (torchrl None)",
        lambda s: (
            s.name == "add"
            and s.cfg.writer == "TensorDictMaxValueWriter"
            and s.theirs == ("NoneType", None)
            and s.ours == ("int", -1)
        ),
    ),
    (
        "dumps of a ListStorage or LazyStackStorage round-trips",
        lambda s: s.name == "dumps" and s.cfg.storage in _LISTS and raises(s.theirs),
    ),
    (
        "TensorDictMaxValueWriter: items outranked later in the same batch count as writes",
        lambda s: (
            s.name in ("extend", "extend_bad")
            and s.cfg.writer == "TensorDictMaxValueWriter"
            and s.theirs == s.ours
        ),
    ),
)


def leaves_comparable_states(step: Step) -> str | None:
    """Why an agreeing step still ends the comparison (a documented difference lies ahead).

    ``rb[i] = x`` outside the written items leaves torchrl's ``len`` behind what
    it wrote; the states only look alike until the next write.
    """
    if step.name == "setitem" and step.op[2] == "raw" and step.outside(step.op[1]):
        return "rb[i] = x outside the written items (rbdata: IndexError, or len grows)"
    return None


def known(step: Step) -> str | None:
    """The migration-page row covering this diverging step, if any."""
    return next((reason for reason, applies in RULES if applies(step)), None)
