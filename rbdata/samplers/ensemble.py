"""SamplerEnsemble: draws from the members of a StorageEnsemble (torchrl's class)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack

from rbdata._component.checks import check_bool, check_int, check_optional_int
from rbdata._component.members import select_members
from rbdata._component.stateful import load_members_state, members_state
from rbdata.storages._base import Storage
from rbdata.storages.ensemble import StorageEnsemble

from ._base import Sampler

__all__ = ["SamplerEnsemble"]


class SamplerEnsemble(Sampler):
    """An ensemble of samplers, one per member of a :class:`~rbdata.StorageEnsemble`.

    A draw of ``batch_size`` picks ``num_buffer_sampled`` members (by default
    as many as there are samplers): every member once with
    ``sample_from_all=True``, else at random, uniformly or with the weights
    ``p``; each picked member then draws ``batch_size // num_buffer_sampled``
    items with its own sampler. The index returned is a TensorDict of batch
    ``[num_buffer_sampled]`` with ``"buffer_ids"`` and the members' rows in
    ``"index"``; the info, the members' infos stacked.

    Args:
        *samplers: the member samplers.
        p: relative weights of the members (normalized), None for uniform, or
            ``"sampleable"``: weights recomputed at each draw from how many items
            each member can still return (``sampler.sampleable(storage)``; members
            with none are left out).
        sample_from_all: draw from every member (not with ``p``).
        num_buffer_sampled: how many members a draw picks (with repetition).
        replacement: accepted for torchrl compatibility: True changes nothing;
            False raises ``TypeError`` (this sampler has no without-replacement variant).

    Raises:
        RuntimeError: for ``p`` together with ``sample_from_all=True`` (torchrl's type).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, RandomSampler, SamplerEnsemble, StorageEnsemble
        >>> storages = StorageEnsemble(LazyTensorStorage(10), LazyTensorStorage(10))
        >>> for storage in storages.members:
        ...     storage.set(torch.arange(10), torch.arange(10.0))
        >>> sampler = SamplerEnsemble(RandomSampler(), RandomSampler(), p=[0.0, 1.0])
        >>> index, info = sampler.sample(storages, 8)
        >>> index["buffer_ids"].tolist(), tuple(index["index"].shape)
        ([1, 1], (2, 4))
    """

    def __init__(
        self,
        *samplers: Sampler,
        p: list[float] | torch.Tensor | str | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        replacement: bool = True,
    ) -> None:
        super().__init__(replacement=replacement)
        for i, sampler in enumerate(samplers):
            if not isinstance(sampler, Sampler):
                raise TypeError(f"samplers[{i}] must be a Sampler, got {type(sampler).__name__}.")
        self._samplers = tuple(samplers)
        self.sample_from_all = check_bool(sample_from_all, "sample_from_all")
        if self.sample_from_all and p is not None:
            raise RuntimeError("Cannot pass both `p` argument and `sample_from_all=True`.")
        self._p: torch.Tensor | str | None = None
        self.p = p
        self._num_buffer_sampled = check_optional_int(
            num_buffer_sampled, "num_buffer_sampled", minimum=1
        )

    # ------------------------------------------------------------ settings
    @property
    def samplers(self) -> tuple[Sampler, ...]:
        """The member samplers, in order."""
        return self._samplers

    @property
    def p(self) -> torch.Tensor | str | None:
        """The members' normalized weights (None: uniform; ``"sampleable"``: dynamic)."""
        return self._p

    @p.setter
    def p(self, value: list[float] | torch.Tensor | str | None) -> None:
        if value is None:
            self._p = None
            return
        if isinstance(value, str):
            if value != "sampleable":
                raise ValueError(
                    f"The only dynamic SamplerEnsemble probability is 'sampleable', got {value!r}."
                )
            self._p = value
            return
        weights = torch.as_tensor(value, dtype=torch.float)
        if weights.ndim != 1 or weights.numel() != len(self._samplers):
            raise ValueError(
                f"p must hold one weight per sampler ({len(self._samplers)}), got shape "
                f"{tuple(weights.shape)}."
            )
        if not torch.isfinite(weights).all() or (weights < 0).any():
            raise ValueError(f"p must hold finite weights >= 0, got {weights.tolist()}.")
        self._p = weights / weights.sum().clamp_min(1e-6)

    @property
    def num_buffer_sampled(self) -> int:
        """How many members one draw picks (the number of samplers unless set)."""
        if self._num_buffer_sampled is None:
            return len(self._samplers)
        return self._num_buffer_sampled

    @num_buffer_sampled.setter
    def num_buffer_sampled(self, value: int | None) -> None:
        self._num_buffer_sampled = check_optional_int(value, "num_buffer_sampled", minimum=1)

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for the ensemble's draws and every member's."""
        super().set_rng(generator)
        for sampler in self._samplers:
            sampler.set_rng(generator)

    # ------------------------------------------------------------ sampling
    def sample(self, storage: Storage, batch_size: int) -> tuple[Any, Any]:
        """Draw ``batch_size`` items from the members of ``storage`` (a StorageEnsemble)."""
        check_int(batch_size, "batch_size", minimum=1)
        if not isinstance(storage, StorageEnsemble):
            raise TypeError(
                f"SamplerEnsemble requires a StorageEnsemble, got {type(storage).__name__}."
            )
        count = self.num_buffer_sampled
        if batch_size % count:
            raise ValueError(
                f"The batch size must be divisible by num_buffer_sampled: got batch_size="
                f"{batch_size} and num_buffer_sampled={count}."
            )
        sub_batch = batch_size // count
        members = storage.members
        if self.sample_from_all:
            buffer_ids = torch.arange(len(self._samplers))
        elif isinstance(self._p, str):
            counts = torch.tensor(
                [float(s.sampleable(m)) for s, m in zip(self._samplers, members, strict=True)]
            )
            if not counts.any():
                raise RuntimeError("None of the replay-buffer ensemble members can be sampled.")
            buffer_ids = torch.multinomial(counts / counts.sum(), count, True, generator=self._rng)
        elif self._p is None:
            buffer_ids = torch.randint(len(self._samplers), (count,), generator=self._rng)
        else:
            buffer_ids = torch.multinomial(self._p, count, True, generator=self._rng)
        rows: list[torch.Tensor] = [torch.empty(0)] * buffer_ids.numel()
        infos: list[dict[str, Any]] = [{}] * buffer_ids.numel()
        for member in buffer_ids.unique(sorted=True).tolist():
            positions = (buffer_ids == member).nonzero().flatten().tolist()
            drawn, info = self._draw(member, members[member], sub_batch * len(positions))
            for chunk, position in enumerate(positions):
                part = slice(chunk * sub_batch, (chunk + 1) * sub_batch)
                rows[position] = drawn[part]
                infos[position] = {
                    key: value[part] if _per_item(value, drawn) else value
                    for key, value in info.items()
                }
        index = TensorDict(
            {"index": _stack(rows), "buffer_ids": buffer_ids}, batch_size=[buffer_ids.numel()]
        )
        return index, _stack_infos(infos, sub_batch)

    def _draw(
        self, member: int, storage: Storage, batch_size: int
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``batch_size`` rows of member ``member`` (several draws when its sampler gives fewer)."""
        parts: list[torch.Tensor] = []
        infos: list[dict[str, Any]] = []
        remaining = batch_size
        while remaining:
            index, info = self._samplers[member].sample(storage, remaining)
            if isinstance(index, tuple):
                index = torch.stack(index, -1)
            if not index.shape[0] or index.shape[0] > remaining:
                raise RuntimeError(
                    f"Sampler {member} returned {index.shape[0]} records for a requested "
                    f"batch of {remaining}."
                )
            parts.append(index)
            infos.append(dict(info))
            remaining -= index.shape[0]
        if len(parts) == 1:
            return parts[0], infos[0]
        merged: dict[str, Any] = {}
        for key in set().union(*infos):
            values = [info.get(key) for info in infos]
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            if len(tensors) == len(parts) and all(
                _per_item(v, p) for v, p in zip(tensors, parts, strict=True)
            ):
                merged[key] = torch.cat(tensors)
            else:
                merged[key] = next(v for v in reversed(values) if v is not None)
        return torch.cat(parts), merged

    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        """Whether a draw of ``batch_size`` can be served by the members it may pick."""
        if not isinstance(storage, StorageEnsemble) or batch_size % self.num_buffer_sampled:
            return False
        ready = [len(member) > 0 for member in storage.members]
        if self.sample_from_all:
            return all(ready)
        if self._p is None or isinstance(self._p, str):
            return any(ready)
        return any(r and w > 0 for r, w in zip(ready, self._p.tolist(), strict=True))

    # ------------------------------------------------------------ members
    def state_dict(self) -> dict[str, Any]:
        """``{"0": sampler 0's state_dict, ...}``."""
        return members_state(self._samplers)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load each member sampler's state from ``state_dict[str(i)]``."""
        load_members_state(self._samplers, state_dict, strict=False)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save each member sampler in the sub-folder ``<i>`` of ``path``."""
        root = Path(path).absolute()
        root.mkdir(parents=True, exist_ok=True)
        for i, sampler in enumerate(self._samplers):
            sampler.dumps(root / str(i))

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load what :meth:`dumps` wrote under ``path``."""
        root = Path(path).absolute()
        for i, sampler in enumerate(self._samplers):
            sampler.loads(root / str(i))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            if len(index) > 1:
                raise IndexError(
                    "Tuple of length greater than 1 are not accepted to index samplers of "
                    f"type {type(self)}."
                )
            index = slice(None) if index[0] is Ellipsis else index[0]
        members = select_members(index, len(self._samplers))
        if members is None:
            return self
        if isinstance(members, int):
            return self._samplers[members]
        return SamplerEnsemble(
            *(self._samplers[i] for i in members),
            p=self._p if self._p is None or isinstance(self._p, str) else self._p[members],
            sample_from_all=self.sample_from_all,
            num_buffer_sampled=self._num_buffer_sampled,
        )

    def __len__(self) -> int:
        return len(self._samplers)

    def __repr__(self) -> str:
        samplers = textwrap.indent(f"samplers={self._samplers}", " " * 4)
        return f"{type(self).__name__}(\n{samplers})"


def _per_item(value: Any, rows: torch.Tensor) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == rows.shape[0]


def _stack(rows: list[torch.Tensor]) -> torch.Tensor:
    if all(row.shape == rows[0].shape for row in rows[1:]):
        return torch.stack(rows)
    return torch.nested.nested_tensor(rows)


def _stack_infos(infos: list[dict[str, Any]], sub_batch: int) -> TensorDictBase:
    tds = [
        TensorDict(
            {k: v for k, v in info.items() if isinstance(v, torch.Tensor)}, batch_size=[sub_batch]
        )
        if info
        else TensorDict()
        for info in infos
    ]
    try:
        stacked: TensorDictBase = torch.stack(tds)  # type: ignore[arg-type,assignment]
    except (RuntimeError, ValueError):
        stacked = lazy_stack(tds)
    return stacked
