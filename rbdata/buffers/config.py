"""ReplayBufferConfig: a typed, plain-valued description of a buffer that builds it.

The reference page's "see also". Every field is a plain type (str, int, float,
bool, or None), so the config is a Hydra structured config and a
LightningCLI / jsonargparse argument group as it is, and ``build()`` makes the
buffer without ``_target_`` or ``hydra.utils.instantiate``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch

from rbdata.buffers.prioritized import PrioritizedReplayBuffer
from rbdata.buffers.replay import ReplayBuffer
from rbdata.buffers.tensordict import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from rbdata.samplers import (
    ConsumingSampler,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from rbdata.storages import (
    CompressedListStorage,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
)
from rbdata.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = ["ReplayBufferConfig"]

_BUFFERS: dict[str, type[ReplayBuffer]] = {
    "ReplayBuffer": ReplayBuffer,
    "TensorDictReplayBuffer": TensorDictReplayBuffer,
    "PrioritizedReplayBuffer": PrioritizedReplayBuffer,
    "TensorDictPrioritizedReplayBuffer": TensorDictPrioritizedReplayBuffer,
}
_PRIORITIZED_BUFFERS = ("PrioritizedReplayBuffer", "TensorDictPrioritizedReplayBuffer")
_STORAGES = (
    "ListStorage",
    "LazyStackStorage",
    "CompressedListStorage",
    "LazyTensorStorage",
    "LazyMemmapStorage",
)
_SAMPLERS = (
    "RandomSampler",
    "SamplerWithoutReplacement",
    "PrioritizedSampler",
    "ConsumingSampler",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "PrioritizedSliceSampler",
)
_WRITERS: dict[str, Callable[..., Writer]] = {
    "RoundRobinWriter": RoundRobinWriter,
    "TensorDictRoundRobinWriter": TensorDictRoundRobinWriter,
    "TensorDictMaxValueWriter": TensorDictMaxValueWriter,
    "ImmutableDatasetWriter": lambda track_generations: ImmutableDatasetWriter(),
}


@dataclass
class ReplayBufferConfig:
    """A replay buffer described by plain values; :meth:`build` makes it.

    Components are named by their class (``storage="LazyMemmapStorage"``);
    the fields after each name are that component's arguments (those of
    other components are ignored). Use it from Hydra as a structured config
    (``cs.store(name="buffer", node=ReplayBufferConfig)``, then
    ``ReplayBufferConfig(**cfg).build()``: no ``_target_``), and from
    LightningCLI / jsonargparse as a typed argument (``buffer:
    ReplayBufferConfig``; ``--buffer.storage LazyMemmapStorage``).

    Attributes:
        buffer: the buffer class: ``ReplayBuffer``, ``TensorDictReplayBuffer``,
            ``PrioritizedReplayBuffer`` or ``TensorDictPrioritizedReplayBuffer``
            (the prioritized ones bring their own ``PrioritizedSampler``).
        storage: ``ListStorage``, ``LazyStackStorage``, ``CompressedListStorage``,
            ``LazyTensorStorage`` or ``LazyMemmapStorage``.
        max_size: the storage's capacity.
        ndim: the storage's number of item dims (tensor storages).
        device: the storage's device (None: its default).
        scratch_dir: where a ``LazyMemmapStorage`` keeps its files (None: a temp dir).
        sampler: ``RandomSampler``, ``SamplerWithoutReplacement``,
            ``PrioritizedSampler``, ``ConsumingSampler``, ``SliceSampler``,
            ``SliceSamplerWithoutReplacement`` or ``PrioritizedSliceSampler``.
        alpha: priority exponent (prioritized samplers and buffers).
        beta: importance-weight exponent (prioritized samplers and buffers).
        eps: added to every priority (prioritized samplers and buffers).
        drop_last: leave out a last, short batch (samplers without replacement).
        shuffle: shuffle each pass (``SamplerWithoutReplacement``).
        max_sample_count: returns after which an item is consumed (``ConsumingSampler``).
        num_slices: slices per batch (slice samplers; or ``slice_len``).
        slice_len: length of each slice (slice samplers; or ``num_slices``).
        traj_key: the trajectory-id entry (slice samplers; None: found).
        end_key: the end-of-trajectory entry (slice samplers; None: found).
        strict_length: drop trajectories shorter than a slice (slice samplers).
        writer: ``RoundRobinWriter``, ``TensorDictRoundRobinWriter``,
            ``TensorDictMaxValueWriter``, ``ImmutableDatasetWriter`` or None
            (the buffer's default).
        rank_key: the entry ranking items (``TensorDictMaxValueWriter``).
        track_generations: stamp slots with generations (writers).
        batch_size: the default ``sample()`` size.
        prefetch: batches sampled ahead on a background thread.
        pin_memory: pin sampled batches.
        dim_extend: the dim ``extend`` splits items along.
        consume_after_n_samples: returns after which an item is consumed (any sampler).
        shared: share the buffer with child processes.
        compilable: the writer may be traced by ``torch.compile``.
        priority_key: the entry holding new priorities (TensorDict buffers).
        seed: seed of a generator for the buffer's draws (None: torch's global RNG).
        service_backend: ``"direct"`` or ``"ray"``.

    Examples:
        >>> from rbdata import ReplayBufferConfig
        >>> config = ReplayBufferConfig(storage="LazyTensorStorage", max_size=100, batch_size=4)
        >>> rb = config.build()
        >>> _ = rb.extend(torch.arange(10))
        >>> rb.sample().shape
        torch.Size([4])
        >>> ReplayBufferConfig.from_dict({"sampler": "SamplerWithoutReplacement"}).sampler
        'SamplerWithoutReplacement'
    """

    buffer: str = "ReplayBuffer"
    storage: str = "LazyTensorStorage"
    max_size: int = 1000
    ndim: int = 1
    device: Optional[str] = None  # noqa: UP045 - Hydra's OmegaConf reads Optional[...]
    scratch_dir: Optional[str] = None  # noqa: UP045
    sampler: str = "RandomSampler"
    alpha: float = 0.6
    beta: float = 0.4
    eps: float = 1e-8
    drop_last: bool = False
    shuffle: bool = True
    max_sample_count: int = 1
    num_slices: Optional[int] = None  # noqa: UP045
    slice_len: Optional[int] = None  # noqa: UP045
    traj_key: Optional[str] = None  # noqa: UP045
    end_key: Optional[str] = None  # noqa: UP045
    strict_length: bool = True
    writer: Optional[str] = None  # noqa: UP045
    rank_key: Optional[str] = None  # noqa: UP045
    track_generations: bool = False
    batch_size: Optional[int] = None  # noqa: UP045
    prefetch: Optional[int] = None  # noqa: UP045
    pin_memory: bool = False
    dim_extend: Optional[int] = None  # noqa: UP045
    consume_after_n_samples: Optional[int] = None  # noqa: UP045
    shared: bool = False
    compilable: bool = False
    priority_key: str = "td_error"
    seed: Optional[int] = None  # noqa: UP045
    service_backend: str = "direct"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ReplayBufferConfig:
        """A config from a mapping (a Hydra / OmegaConf node turned into a dict).

        Raises:
            TypeError: if ``values`` is not a mapping.
            ValueError: naming the keys that are no field (``_target_`` is ignored).
        """
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping, got {type(values).__name__}.")
        known = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in values.items() if k != "_target_"}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(
                f"unknown ReplayBufferConfig fields {unknown}; expected {sorted(known)}."
            )
        return cls(**given)

    def build(self) -> ReplayBuffer:
        """The buffer this config describes.

        Raises:
            ValueError: for a component name that is not one of those listed, or
                arguments the components refuse.
            TypeError: for arguments of the wrong type.
        """
        buffer_cls: type[ReplayBuffer] = _choose(self.buffer, _BUFFERS, "buffer")
        kwargs: dict[str, Any] = {
            "storage": self._storage(),
            "batch_size": self.batch_size,
            "prefetch": self.prefetch,
            "pin_memory": self.pin_memory,
            "dim_extend": self.dim_extend,
            "consume_after_n_samples": self.consume_after_n_samples,
            "shared": self.shared,
            "compilable": self.compilable,
            "service_backend": self.service_backend,
        }
        if self.seed is not None:
            kwargs["generator"] = torch.Generator().manual_seed(self.seed)
        if self.writer is not None:
            kwargs["writer"] = self._writer()
        if self.buffer in _PRIORITIZED_BUFFERS:
            kwargs.update(alpha=self.alpha, beta=self.beta, eps=self.eps)
        else:
            kwargs["sampler"] = self._sampler()
        if issubclass(buffer_cls, TensorDictReplayBuffer):
            kwargs["priority_key"] = self.priority_key
        return buffer_cls(**kwargs)

    def _storage(self) -> Storage:
        name = _choose(self.storage, dict.fromkeys(_STORAGES, None), "storage")
        device: dict[str, Any] = {} if self.device is None else {"device": self.device}
        if name == "ListStorage":
            return ListStorage(self.max_size, **device)
        if name == "LazyStackStorage":
            return LazyStackStorage(self.max_size, **device)
        if name == "CompressedListStorage":
            return CompressedListStorage(self.max_size, **device)
        if name == "LazyTensorStorage":
            return LazyTensorStorage(self.max_size, ndim=self.ndim, **device)
        return LazyMemmapStorage(
            self.max_size, ndim=self.ndim, scratch_dir=self.scratch_dir, **device
        )

    def _sampler(self) -> Sampler:
        name = _choose(self.sampler, dict.fromkeys(_SAMPLERS, None), "sampler")
        if name == "RandomSampler":
            return RandomSampler()
        if name == "SamplerWithoutReplacement":
            return SamplerWithoutReplacement(drop_last=self.drop_last, shuffle=self.shuffle)
        if name == "ConsumingSampler":
            return ConsumingSampler(self.max_sample_count)
        capacity = self.max_size
        if name == "PrioritizedSampler":
            return PrioritizedSampler(capacity, self.alpha, self.beta, eps=self.eps)
        slices: dict[str, Any] = {
            "num_slices": self.num_slices,
            "slice_len": self.slice_len,
            "traj_key": self.traj_key,
            "end_key": self.end_key,
            "strict_length": self.strict_length,
        }
        if name == "SliceSampler":
            return SliceSampler(**slices)
        if name == "SliceSamplerWithoutReplacement":
            return SliceSamplerWithoutReplacement(
                drop_last=self.drop_last, shuffle=self.shuffle, **slices
            )
        return PrioritizedSliceSampler(
            max_capacity=capacity, alpha=self.alpha, beta=self.beta, eps=self.eps, **slices
        )

    def _writer(self) -> Writer:
        assert self.writer is not None
        make: Callable[..., Writer] = _choose(self.writer, _WRITERS, "writer")
        if self.writer == "TensorDictMaxValueWriter":
            return TensorDictMaxValueWriter(
                rank_key=self.rank_key, track_generations=self.track_generations
            )
        return make(track_generations=self.track_generations)


def _choose(name: Any, choices: Mapping[str, Any], field: str) -> Any:
    """``choices[name]``; a TypeError / ValueError naming ``field`` and the choices otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"ReplayBufferConfig.{field} must be a str, got {type(name).__name__}.")
    if name not in choices:
        raise ValueError(f"ReplayBufferConfig.{field}={name!r} is not one of {sorted(choices)}.")
    return choices[name] if choices[name] is not None else name
