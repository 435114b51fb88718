"""ReplayDataModule: a replay buffer served to ``Trainer.fit`` as a LightningDataModule."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, TypeGuard, cast, runtime_checkable

import lightning.pytorch as pl
import torch
from lightning.pytorch.accelerators import CUDAAccelerator
from tensordict import TensorDictBase
from torchdata.stateful_dataloader import StatefulDataLoader
from tqdm.auto import tqdm

from rbdata.buffers.protocol import ServableBuffer
from rbdata.datasets import load_offline_data
from rbdata.lightning._checkpoint_io import (
    DUMPS_KEY,
    PATH_KEY,
    RANKS_KEY,
    STAGING_DIR,
    STAGING_KEY,
    _BufferCheckpointIO,
)
from rbdata.loader import ReplayDataset
from rbdata.loader._rank_share import RankShareBuffer
from rbdata.loader.dataset import buffer_capacity

__all__ = ["ReplayDataModule"]

_FILL_CHUNK = 65_536  # items per extend when loading offline data
_PROGRESS_DELAY_S = 0.5


class ReplayDataModule(pl.LightningDataModule):
    """Serves batches sampled from a replay buffer to ``Trainer.fit``.

    ``setup`` builds the buffer (calling ``buffer`` when it is a factory, so
    each process builds its own), seeds its sampling generator and loads
    ``offline_data`` into it. ``train_dataloader`` returns a torchdata
    ``StatefulDataLoader`` over a :class:`~rbdata.loader.ReplayDataset`; one
    epoch is ``batches_per_epoch`` batches (without it, one pass of the
    sampler: endless for random and prioritized samplers, so bound the run
    with ``max_steps``).

    Under DDP each rank builds its own buffer and samples with its own
    deterministic seed, ``seed + global_rank``, unless ``share_across_ranks``:
    then the factory runs once, on local rank 0, the other ranks map that
    buffer (shared memory, no copy), and each step the ranks train on disjoint
    shares of one global batch of ``batch_size * world_size`` rows drawn by
    its one sampler (see the Lightning guide's DDP section). A Ray-backed
    buffer (``service_backend="ray"``) is one buffer shared by all ranks and
    is left as it is: with a factory, rank 0
    builds it (the actor, with ``offline_data`` loaded once) and every other
    rank gets its ``client()`` through the strategy's broadcast.

    With ``checkpoint_buffer``, every Lightning checkpoint also saves the
    buffer: its contents, sampler, writer and generator state as a ``dumps``
    directory ``<checkpoint>.buffer-<id>`` beside the ``.ckpt`` (written
    first, atomically, and referenced from the ``.ckpt``; removed with the
    checkpoint when ``ModelCheckpoint`` deletes it), while Lightning keeps the
    data loader's position in the ``.ckpt``. ``Trainer.fit(ckpt_path=...)``
    (``"last"`` included) restores both, so the batches after a resume are
    those an uninterrupted run would have drawn.

    Under a Trainer the loader reports no ``len()`` (Lightning warns about an
    ``IterableDataset`` with one); the epoch's length reaches Lightning as
    ``Trainer.limit_train_batches`` instead: left at its default ``1.0`` it
    becomes ``batches_per_epoch`` (a fraction ``f``, ``int(f *
    batches_per_epoch)``) until ``teardown``.

    Args:
        buffer: a replay buffer (an rbdata ``ReplayBuffer`` or a composite one such
            as ``OfflineToOnlineReplayBuffer``), or a callable with no argument
            returning one (run in ``setup``, so each process builds its own).
        batch_size: items per batch; None uses the buffer's ``batch_size``.
        batches_per_epoch: batches per training epoch; None: one sampler pass.
        prefetch: batches sampled ahead on a background thread.
        pin_memory: pin batches in page-locked memory; ``"auto"`` pins when
            training on a CUDA device.
        min_size: wait for the buffer to hold this many items before the first
            batch (learning starts); at most the buffer's capacity. The wait
            logs a line every few seconds; with ``timeout`` it raises a
            TimeoutError when no write came for that long.
        offline_data: data put into the buffer in ``setup``: a TensorDict, a
            ``dumps`` directory, a memory-mapped TensorDict directory or a
            D4RL-style ``.hdf5`` / ``.h5`` file (see
            :func:`rbdata.datasets.load_offline_data`).
        checkpoint_buffer: save the buffer with every Lightning checkpoint
            (False keeps it out of checkpoints).
        samples_per_insert: target ratio of sampled to inserted items; the
            loader waits for a collector when sampling runs ahead of it.
        timeout: seconds to wait for new data (an online buffer fed by a
            collector) before an epoch ends; None ends it at once. Under a
            Trainer an epoch that would hand out no batch at all raises a
            RuntimeError instead (``fit`` never runs empty epochs).
        seed: seed of the buffer's sampling generator (rank ``r`` uses
            ``seed + r``; with ``share_across_ranks``, the one sampler uses
            ``seed``); None takes ``torch.initial_seed()``, which
            ``lightning.seed_everything`` sets.
        share_across_ranks: under DDP on one node, one buffer for every rank:
            local rank 0 runs the factory and holds the sampler, the other
            ranks attach to it; rows any rank writes are sampled by all,
            priorities and policy versions of every rank reach the one
            sampler, a checkpoint saves it once and resumes with any world
            size. The buffer must be one processes can share (a ReplayBuffer
            over a CPU tensor or memmap storage, shared here if need be).
            Without a Trainer it has no effect.

    Raises:
        TypeError: if ``buffer`` is neither a buffer nor a callable, ``seed``
            is not an int, or ``share_across_ranks`` not a bool.
        ValueError: if a count is not an int in range, ``pin_memory`` is not
            a bool or ``"auto"``, or ``min_size`` exceeds the buffer's capacity
            (here for a buffer, in ``setup`` for a factory); with
            ``share_across_ranks``, in ``setup``, if the buffer cannot be shared
            between processes or the run spans several nodes (use
            ``service_backend="ray"`` there).

    Note:
        Under DDP with a buffer per rank, every rank dumps its own buffer while a
        checkpoint is made (into ``<default_root_dir>/.rbdata-rank-buffers``, then
        moved beside the checkpoint as ``rank<r>`` folders), and every rank
        resumes from its own; Lightning keeps rank 0's data-loader position only.
        A buffer shared by the ranks (``share_across_ranks``, or Ray-backed) is
        saved once, by rank 0, with the loader's state as the global draws, so
        a run resumes with another number of ranks.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictReplayBuffer
        >>> from rbdata.lightning import ReplayDataModule
        >>> data = TensorDict({"observation": torch.randn(100, 4)}, batch_size=[100])
        >>> dm = ReplayDataModule(
        ...     lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(1000)),
        ...     batch_size=32, batches_per_epoch=10, offline_data=data, seed=0,
        ... )
        >>> dm.setup("fit")
        >>> len(dm.buffer)
        100
        >>> batch = next(iter(dm.train_dataloader()))
        >>> batch["observation"].shape
        torch.Size([32, 4])
    """

    def __init__(
        self,
        buffer: ServableBuffer | Callable[[], ServableBuffer],
        batch_size: int | None = None,
        batches_per_epoch: int | None = None,
        prefetch: int = 0,
        pin_memory: bool | Literal["auto"] = "auto",
        min_size: int = 0,
        offline_data: str | os.PathLike[str] | TensorDictBase | None = None,
        checkpoint_buffer: bool = True,
        samples_per_insert: float | None = None,
        timeout: float | None = None,
        seed: int | None = None,
        share_across_ranks: bool = False,
    ) -> None:
        super().__init__()
        if not (_is_buffer(buffer) or callable(buffer)):
            raise TypeError(
                "buffer must be a replay buffer or a callable returning one, got "
                f"{type(buffer).__name__}."
            )
        if pin_memory != "auto" and not isinstance(pin_memory, bool):
            raise ValueError(f'pin_memory must be True, False or "auto", got {pin_memory!r}.')
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None, got {seed!r}.")
        if not isinstance(share_across_ranks, bool):
            raise TypeError(f"share_across_ranks must be a bool, got {share_across_ranks!r}.")
        for name, value, minimum in (
            ("batch_size", batch_size, 1),
            ("batches_per_epoch", batches_per_epoch, 1),
            ("prefetch", prefetch, 0),
            ("min_size", min_size, 0),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < minimum
            ):
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")
        if _is_buffer(buffer):
            _check_min_size(min_size, buffer)
        self._buffer_arg = buffer
        self.batch_size = batch_size
        self.batches_per_epoch = batches_per_epoch
        self.prefetch = prefetch
        self.pin_memory = pin_memory
        self.min_size = min_size
        self.offline_data = offline_data
        self.checkpoint_buffer = checkpoint_buffer
        self.samples_per_insert = samples_per_insert
        self.timeout = timeout
        self.seed = seed
        self.share_across_ranks = share_across_ranks
        self._buffer: ServableBuffer | None = None
        self._dataset: ReplayDataset | None = None
        # (the trainer's limit_train_batches, what _give_epoch_length set it to)
        self._limit_given: tuple[float, int] | None = None

    @property
    def buffer(self) -> ServableBuffer:
        """The replay buffer (built by :meth:`setup`)."""
        if self._buffer is None:
            raise RuntimeError(
                "ReplayDataModule.buffer is built in setup(): call dm.setup('fit') first "
                "(Trainer.fit does it)."
            )
        return self._buffer

    # ------------------------------------------------------------ lifecycle
    def setup(self, stage: str) -> None:
        """Build and seed the buffer and load ``offline_data`` into it (once)."""
        if self.share_across_ranks and self.trainer is not None:
            if self._buffer is None or _closed_share(self._buffer):
                self._buffer = self._shared_buffer(self.trainer)
        elif self._buffer is None:
            buffer, owned = self._build_buffer()
            _check_min_size(self.min_size, buffer)
            self._seed(buffer)
            if self.offline_data is not None and owned:
                _fill(buffer, load_offline_data(self.offline_data))
            self._buffer = buffer
        if self.trainer is not None and self.checkpoint_buffer:
            self._attach_checkpoint_io(self.trainer)

    def train_dataloader(self) -> StatefulDataLoader[Any]:
        """A StatefulDataLoader over a :class:`~rbdata.loader.ReplayDataset` of the buffer."""
        self._close_dataset()
        self._dataset = ReplayDataset(
            self.buffer,
            batch_size=self.batch_size,
            num_batches=self.batches_per_epoch,
            prefetch=self.prefetch,
            pin_memory=self._pin_memory(),
            min_size=self.min_size,
            timeout=self.timeout,
            samples_per_insert=self._rank_samples_per_insert(),
        )
        trainer = self.trainer
        # Lightning fetches one batch ahead of the training step when the loader has no
        # length; checkpoints must count that batch as not handed out yet.
        lookahead = trainer is not None and self.batches_per_epoch is None
        self._dataset.held_back = 1 if lookahead else 0
        # Under a Trainer, an epoch without a batch is an error, never an empty epoch in a loop.
        self._dataset.allow_empty_pass = trainer is None
        loader = _ReplayDataLoader(self._dataset, batch_size=None)
        # The buffer starts afresh on resume when it is not checkpointed: a saved pass
        # position would not fit it.
        loader.checkpointed = self.checkpoint_buffer
        if isinstance(trainer, pl.Trainer):
            self._give_epoch_length(trainer, loader)
        return loader

    def _rank_samples_per_insert(self) -> float | None:
        """The ratio one rank keeps: its share of the global batch samples ``1 / world_size``."""
        ratio, buffer = self.samples_per_insert, self._buffer
        if ratio is None or not isinstance(buffer, RankShareBuffer):
            return ratio
        return ratio / buffer.world_size

    def _give_epoch_length(self, trainer: pl.Trainer, loader: _ReplayDataLoader) -> None:
        """Tell Lightning the epoch's length through ``limit_train_batches``, not ``len()``.

        Lightning warns about every ``IterableDataset`` whose loader has a
        ``len()`` (a guard for datasets that workers would duplicate); a
        ReplayDataset's pass length is exact, so the loader under a Trainer has
        no ``len()`` and the length reaches Lightning as the batch limit it
        computes from one: the progress bar's total, ``val_check_interval``
        and ``estimated_stepping_batches`` stay what they would be.
        """
        loader.sized = False
        if self.batches_per_epoch is None:
            return
        limit = trainer.limit_train_batches
        if self._limit_given is not None and limit == self._limit_given[1]:
            limit = self._limit_given[0]  # the value before a previous train_dataloader()
        if isinstance(limit, float):
            given = limit
            limit = (
                self.batches_per_epoch
                if limit == 1.0
                else max(1 if limit > 0 else 0, int(limit * self.batches_per_epoch))
            )
            self._limit_given = (given, limit)
            trainer.limit_train_batches = limit

    def teardown(self, stage: str) -> None:
        """Stop the data loader's background sampling; give the Trainer its batch limit back.

        With ``share_across_ranks``, stop serving the other ranks (local rank 0
        keeps the buffer: ``dm.buffer.local``).
        """
        self._close_dataset()
        if isinstance(self._buffer, RankShareBuffer):
            self._buffer.close()
        trainer, given = self.trainer, self._limit_given
        if trainer is not None and given is not None and trainer.limit_train_batches == given[1]:
            trainer.limit_train_batches = given[0]
        self._limit_given = None

    # ---------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a Lightning checkpoint keeps of the buffer: a reference to its dump.

        The dump itself is written beside the checkpoint file when the
        checkpoint is saved (see the class docstring); nothing when
        ``checkpoint_buffer`` is False.
        """
        if not self.checkpoint_buffer or self._buffer is None:
            return {}
        trainer = self.trainer
        if trainer is None or not self._buffer_per_rank():
            return {DUMPS_KEY: None}
        # Every rank runs this while the checkpoint is made; rank 0 writes the file.
        strategy = trainer.strategy
        token = uuid.uuid4().hex[:12] if trainer.global_rank == 0 else None
        token = cast(str, strategy.broadcast(token, src=0))  # rank 0's, on every rank
        staging = Path(trainer.default_root_dir) / STAGING_DIR / token
        self.buffer.dumps(staging / f"rank{trainer.global_rank}")
        strategy.barrier("rbdata-rank-buffers")
        return {DUMPS_KEY: None, STAGING_KEY: str(staging), RANKS_KEY: trainer.world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the buffer dump a checkpoint references (called by ``Trainer.fit(ckpt_path)``)."""
        if not self.checkpoint_buffer or state_dict.get(DUMPS_KEY) is None:
            return
        path = state_dict.get(PATH_KEY)
        if path is None:
            raise RuntimeError(
                f"the checkpoint references the buffer dump {state_dict[DUMPS_KEY]!r} but was "
                "not loaded by a Trainer this data module was set up with; resume with "
                "Trainer.fit(model, datamodule=dm, ckpt_path=...)."
            )
        ranks = state_dict.get(RANKS_KEY)
        buffer = self.buffer
        if isinstance(buffer, RankShareBuffer):  # saved once; local rank 0 loads it
            if buffer.owner:
                buffer.loads(path)
            if self.trainer is not None:
                self.trainer.strategy.barrier("rbdata-shared-buffer-loaded")
            buffer.reattach()  # the other ranks map what rank 0 loaded
            return
        if ranks is None:
            buffer.loads(path)
            return
        rank = self.trainer.global_rank if self.trainer is not None else 0
        if rank >= int(ranks):
            raise RuntimeError(
                f"the checkpoint holds the buffers of {ranks} DDP ranks; this is rank {rank}: "
                "resume with as many ranks as the run that saved it."
            )
        self.buffer.loads(Path(path) / f"rank{rank}")

    # ------------------------------------------------------------ internals
    def _buffer_per_rank(self) -> bool:
        """Whether every DDP rank holds a buffer of its own (not one Ray-hosted buffer)."""
        trainer = self.trainer
        if trainer is None or trainer.world_size <= 1 or isinstance(self._buffer, RankShareBuffer):
            return False
        return _backend(self.buffer) == "direct"

    def _build_buffer(self) -> tuple[ServableBuffer, bool]:
        """The buffer, and whether this process owns it (loads the offline data into it).

        Under a multi-process strategy rank 0 runs the factory first; when it
        builds a Ray-backed buffer, the other ranks get its ``client()``
        through the strategy's broadcast instead of building buffers of their own.
        """
        arg = self._buffer_arg
        if not callable(arg) or _is_buffer(arg):
            return arg, True
        trainer = self.trainer
        if trainer is None or trainer.world_size == 1:
            return _built(arg), True
        built = _built(arg) if trainer.global_rank == 0 else None
        remote = built is not None and _backend(built) == "ray"
        # a Ray-backed buffer is a ReplayBuffer, which hands out clients
        client = cast(_RayBacked, built).client() if remote else None
        shared = trainer.strategy.broadcast(client, src=0)
        if built is not None:
            return built, True
        if shared is not None:
            return shared, False
        return _built(arg), True

    def _shared_buffer(self, trainer: pl.Trainer) -> ServableBuffer:
        """``share_across_ranks``: local rank 0 builds the buffer, the other ranks attach to it.

        A Ray-backed buffer is shared as without the flag (its clients). On
        a second ``fit`` in the same process, local rank 0 serves the buffer
        it already holds.
        """
        if trainer.num_nodes > 1:
            raise ValueError(
                f"share_across_ranks=True shares one buffer between the ranks of one node through "
                f"shared memory; this run has {trainer.num_nodes} nodes. Across nodes, make the "
                'factory return a Ray-backed buffer (service_backend="ray"): one buffer every '
                "rank of every node reaches (see docs/ray.md)."
            )
        world, rank = trainer.world_size, trainer.global_rank
        offer: tuple[str, Any] | None = None
        mine: ServableBuffer | None = None
        if rank == 0:
            previous = self._buffer
            if isinstance(previous, RankShareBuffer):
                buffer, fresh = previous.local, False
            else:
                buffer, fresh = self._build_buffer_here(), True
            if _backend(buffer) == "ray":  # shared already, on every node
                if fresh and self.offline_data is not None:
                    _fill(buffer, load_offline_data(self.offline_data))
                mine, offer = buffer, ("ray", cast(_RayBacked, buffer).client())
            else:
                _check_min_size(self.min_size, buffer)
                shared = RankShareBuffer.owned(buffer, world)
                if fresh:
                    self._seed(buffer)
                    if self.offline_data is not None:
                        _fill(buffer, load_offline_data(self.offline_data))
                mine, offer = shared, ("share", shared.rank_access)
        if world > 1:
            offer = trainer.strategy.broadcast(offer, src=0)
        if mine is not None:
            return mine
        if offer is None:  # pragma: no cover - rank 0 always offers
            raise RuntimeError("local rank 0 offered no shared buffer")
        kind, payload = offer
        return payload if kind == "ray" else RankShareBuffer.attached(payload, rank)

    def _build_buffer_here(self) -> ServableBuffer:
        arg = self._buffer_arg
        return arg if _is_buffer(arg) or not callable(arg) else _built(arg)

    def _seed(self, buffer: ServableBuffer) -> None:
        if _backend(buffer) != "direct":
            return  # one remote buffer shared by every rank: its sampling is its own
        shared = self.share_across_ranks  # one sampler for every rank: one seed
        rank = self.trainer.global_rank if self.trainer is not None and not shared else 0
        base = self.seed if self.seed is not None else torch.initial_seed()
        buffer.set_rng(torch.Generator().manual_seed((base + rank) % (1 << 63)))

    def _pin_memory(self) -> bool:
        if self.pin_memory != "auto":
            return self.pin_memory
        if self.trainer is not None:
            return isinstance(self.trainer.accelerator, CUDAAccelerator)
        return torch.cuda.is_available()

    def _attach_checkpoint_io(self, trainer: pl.Trainer) -> None:
        strategy = trainer.strategy
        io = strategy.checkpoint_io
        if isinstance(io, _BufferCheckpointIO):
            io.datamodule = self
        else:
            strategy.checkpoint_io = _BufferCheckpointIO(io, self)

    def _close_dataset(self) -> None:
        if self._dataset is not None:
            self._dataset.close()
            self._dataset = None


class _ReplayDataLoader(StatefulDataLoader[Any]):
    """The data module's StatefulDataLoader.

    ``sized=False`` (under a Trainer) hides its length from Lightning (see
    ``ReplayDataModule._give_epoch_length``); ``checkpointed=False``
    (``checkpoint_buffer=False``) keeps its state out of checkpoints.
    """

    sized: bool = True
    checkpointed: bool = True

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError(
                "under a Trainer, ReplayDataModule's loader gives its epoch length to Lightning "
                "as Trainer.limit_train_batches, not as len()."
            )
        return super().__len__()

    def state_dict(self) -> dict[str, Any]:
        """The loader's state; nothing when not checkpointed (a fresh buffer on resume)."""
        return super().state_dict() if self.checkpointed else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (ignored when not checkpointed)."""
        if self.checkpointed:
            super().load_state_dict(state_dict)


def _check_min_size(min_size: int, buffer: ServableBuffer) -> None:
    capacity = buffer_capacity(buffer)
    if capacity is not None and min_size > capacity:
        raise ValueError(
            f"min_size={min_size} is more than the buffer can ever hold (capacity {capacity}): "
            f"training would wait forever; pass min_size <= {capacity} or a larger storage."
        )


@runtime_checkable
class _Backed(Protocol):
    """A buffer that says where it runs (rbdata's buffers: ``"direct"`` or ``"ray"``)."""

    @property
    def service_backend(self) -> str: ...


def _backend(buffer: object) -> str:
    """Where ``buffer`` runs: its ``service_backend``, else ``"direct"`` (a client...)."""
    return buffer.service_backend if isinstance(buffer, _Backed) else "direct"


class _RayBacked(Protocol):
    """A buffer hosted in a Ray actor: it hands out clients of itself."""

    def client(self) -> ServableBuffer: ...


def _is_buffer(obj: object) -> TypeGuard[ServableBuffer]:
    """A replay buffer (an instance implementing the ServableBuffer protocol, not a class)."""
    return not isinstance(obj, type) and isinstance(obj, ServableBuffer)


def _closed_share(buffer: ServableBuffer) -> bool:
    """Whether ``buffer`` is a rank's share of a buffer that a ``teardown`` closed."""
    return isinstance(buffer, RankShareBuffer) and buffer.closed


def _built(factory: Callable[[], Any]) -> ServableBuffer:
    buffer = factory()
    if not _is_buffer(buffer):
        raise TypeError(
            f"the buffer factory must return a replay buffer, got {type(buffer).__name__}."
        )
    return buffer


def _fill(buffer: ServableBuffer, data: TensorDictBase) -> None:
    """Extend ``buffer`` with ``data`` in chunks, with a progress bar for long loads."""
    n = data.shape[0]
    with tqdm(total=n, unit="items", desc="loading offline data", delay=_PROGRESS_DELAY_S) as bar:
        for start in range(0, n, _FILL_CHUNK):
            stop = min(n, start + _FILL_CHUNK)
            buffer.extend(data[start:stop])
            bar.update(stop - start)
