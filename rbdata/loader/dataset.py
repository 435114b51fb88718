"""ReplayDataset: a replay buffer served as a (stateful) PyTorch IterableDataset."""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.hooks import RemovableHandle

from rbdata._component.checks import check_bool, check_int, check_number, check_optional_int
from rbdata._component.prefetch_state import read_draw_records
from rbdata.buffers.offline_to_online import OfflineToOnlineReplayBuffer
from rbdata.buffers.protocol import ServableBuffer
from rbdata.buffers.replay import ReplayBuffer
from rbdata.loader import _workers
from rbdata.loader._draw_service import DrawAccess, DrawService
from rbdata.loader._pass import _PassEngine, _Record
from rbdata.loader._prefetch import _PrefetchThread
from rbdata.loader._rank_share import SplitsDraws
from rbdata.loader._worker_position import WorkerPosition
from rbdata.loader.rate_limit import SampleToInsertRatio
from rbdata.sharing.counters import spawning

if TYPE_CHECKING:
    from torchdata.stateful_dataloader import StatefulDataLoader

__all__ = ["ReplayDataset"]

_STATE_FORMAT = 1


class ReplayDataset(IterableDataset[Any]):
    """Serve a replay buffer as an ``IterableDataset`` of sampled batches.

    Use it with ``torch.utils.data.DataLoader(ds, batch_size=None)``, with
    torchdata's ``StatefulDataLoader`` (``ds.dataloader(**kwargs)`` builds
    one), or iterate it directly. Each batch is a
    :class:`~rbdata.loader.ReplayBatch` (a TensorDict) holding ``index`` and,
    when the writer tracks them, ``index_generation`` (``priority_weight`` for
    prioritized buffers); it survives torch's default conversion.

    **Passes.** With ``num_batches`` a pass yields exactly that many batches
    (running across without-replacement epochs if needed) and ``len(ds) ==
    num_batches``. Without it the sampler decides: a without-replacement pass
    yields every item once, a consume-after-n pass ends when everything is
    consumed, a random or prioritized pass never ends. An empty or exhausted
    buffer ends the pass at once, unless ``timeout`` is set: then the dataset
    waits up to ``timeout`` seconds for new data (a collector thread filling
    the buffer) and ends the pass without error if none comes. ``min_size``
    makes the first sample wait until the buffer holds that many items (it
    must not exceed the buffer's capacity); the wait logs a line every few
    seconds (what it waits for, what the buffer holds) and, with ``timeout``,
    raises a ``TimeoutError`` once no write came for that long: learning
    that never started is an error, a collector pausing after it started is
    not. Waits sleep on the buffer's condition (no busy loop). With
    ``allow_empty_pass = False`` (Lightning's data module sets it) a pass
    that hands out no batch at all raises a RuntimeError instead of ending.

    **DataLoader.** The dataset yields whole batches: wrap it with
    ``DataLoader(ds, batch_size=None)`` (or ``ds.dataloader()``). A loader
    that batches again (torch's default ``batch_size=1``) raises a
    ValueError when it starts, instead of yielding batches of shape
    ``[1, batch_size]``.

    **Prefetch.** ``prefetch=k`` samples exactly ``k`` batches ahead on a
    background thread, which also gathers them (copies: later writes to the
    buffer never change them), pins them (``pin_memory``) and copies them to
    ``device`` with ``non_blocking=True``. Row filters of the buffer
    (:class:`~rbdata.PolicyAgeFilter`) run again when a prefetched batch is
    handed out, so prefetching never lets older data through than the bound;
    such filters make batches smaller than ``batch_size``, even empty.
    A loop that stops early leaves its prefetched batches to the next pass:
    they are handed out first, never lost nor counted twice.

    **Rate limiting.** ``samples_per_insert`` (or a shared
    :class:`~rbdata.loader.SampleToInsertRatio` as ``rate_limiter``) makes the
    dataset wait for the collector when the learner samples too fast; waits
    and the current ratio show in ``buffer.stats()``. With ``timeout``, a wait
    without new data for that long ends the pass.

    **Checkpoints.** :meth:`state_dict` / :meth:`load_state_dict` (torchdata's
    Stateful protocol) record what was handed out: the sampler and RNG state
    at this moment, the batches sampled but not handed out (their indices;
    their data is gathered again after loading) and the position in the pass.
    Restore the buffer first (``buffer.loads``), then the dataset or the
    ``StatefulDataLoader``: the resumed loader yields exactly the batches the
    original would have yielded next (with a seeded buffer ``generator``).
    A consumer that holds ``n`` batches back from the training step (Lightning
    fetches one ahead) sets ``ds.held_back = n`` so that checkpoints treat
    them as not handed out.

    **Workers.** ``num_workers > 0`` works with every sampler over a
    LazyMemmapStorage or a shared-memory storage: the buffer's own sampler
    draws each batch in this process, in batch order (batch ``k`` goes to
    worker ``k % num_workers``), and the worker gathers and transforms it, so
    workers see new rows, priority updates and consumption counts, at most
    ``prefetch_factor * num_workers`` batches late; ``num_batches`` counts
    batches across all workers. Other storages raise a RuntimeError pointing
    to ``prefetch``, the thread-based alternative. :meth:`close` stops the
    thread that draws for the workers.

    Args:
        buffer: an rbdata replay buffer.
        batch_size: items per batch; defaults to the buffer's ``batch_size``.
        num_batches: batches per pass (None: the sampler decides).
        prefetch: batches sampled ahead on a background thread (0: none).
        pin_memory: pin prefetched batches (warns once and does nothing
            without an accelerator).
        device: copy batches to this device (``non_blocking=True``).
        min_size: wait until the buffer holds this many items (at most its
            capacity).
        timeout: seconds to wait for new data before ending a pass (None:
            an empty or exhausted buffer ends it at once); a wait for
            ``min_size`` that gets no write for this long raises TimeoutError.

    Keyword Args:
        samples_per_insert: target sampled/inserted ratio (builds a
            :class:`SampleToInsertRatio` with its default tolerance).
        rate_limiter: a :class:`SampleToInsertRatio` shared with collectors
            (exclusive with ``samples_per_insert``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torch.utils.data import DataLoader
        >>> from rbdata import LazyTensorStorage, SamplerWithoutReplacement
        >>> from rbdata import ReplayDataset, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(100), sampler=SamplerWithoutReplacement(), batch_size=4
        ... )
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0)}, batch_size=[10]))
        >>> with ReplayDataset(rb, prefetch=2) as ds:
        ...     batches = list(DataLoader(ds, batch_size=None))
        >>> [b.batch_size[0] for b in batches]
        [4, 4, 2]
        >>> sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(10))
        True
    """

    def __init__(
        self,
        buffer: Any,
        batch_size: int | None = None,
        num_batches: int | None = None,
        prefetch: int = 0,
        pin_memory: bool = False,
        device: torch.device | str | None = None,
        min_size: int = 0,
        timeout: float | None = None,
        *,
        samples_per_insert: float | None = None,
        rate_limiter: SampleToInsertRatio | None = None,
        return_info: bool = False,
    ) -> None:
        if not isinstance(buffer, ServableBuffer):
            raise TypeError(
                f"buffer must be a replay buffer implementing rbdata's ServableBuffer protocol "
                f"(an rbdata ReplayBuffer, OfflineToOnlineReplayBuffer, ...), got "
                f"{type(buffer).__name__}."
            )
        batch_size = buffer.batch_size if batch_size is None else batch_size
        if batch_size is None:
            raise ValueError(
                "batch_size is None and the buffer has no batch_size; pass batch_size=... to "
                "ReplayDataset or to the buffer."
            )
        check_int(batch_size, "batch_size", minimum=1)
        check_optional_int(num_batches, "num_batches", minimum=1)
        check_int(prefetch, "prefetch", minimum=0)
        check_int(min_size, "min_size", minimum=0)
        capacity = buffer_capacity(buffer)
        if capacity is not None and min_size > capacity:
            raise ValueError(
                f"min_size={min_size} is more than the buffer can ever hold (capacity "
                f"{capacity}): the dataset would wait forever; pass min_size <= {capacity} or "
                f"a larger storage."
            )
        check_bool(pin_memory, "pin_memory")
        if timeout is not None:
            check_number(timeout, "timeout", minimum=0.0)
        if samples_per_insert is not None and rate_limiter is not None:
            raise ValueError("pass samples_per_insert or rate_limiter, not both.")
        if rate_limiter is not None and not isinstance(rate_limiter, SampleToInsertRatio):
            raise TypeError(
                f"rate_limiter must be a SampleToInsertRatio, got {type(rate_limiter).__name__}."
            )
        device = None if device is None else torch.device(device)
        if samples_per_insert is not None:
            rate_limiter = SampleToInsertRatio(samples_per_insert)
        if rate_limiter is not None:
            rate_limiter.attach(buffer)
        self.buffer = buffer
        self.batch_size: int = batch_size
        self.num_batches = num_batches
        self.prefetch = prefetch
        self.pin_memory = pin_memory
        self.device = device
        self.min_size = min_size
        self.timeout = None if timeout is None else float(timeout)
        self.rate_limiter = rate_limiter
        self.return_info = check_bool(return_info, "return_info")
        self.held_back = 0
        #: False: a pass that ends before handing out any batch raises (Lightning sets it,
        #: so that ``fit`` never runs empty epochs)
        self.allow_empty_pass = True
        self._pin = pin_memory and _accelerator_available()
        if pin_memory and not self._pin:
            warnings.warn(
                "ReplayDataset(pin_memory=True): no accelerator is available, batches are not "
                "pinned.",
                stacklevel=2,
            )
        self._device = None if device is None or device.type == "cpu" else device
        #: how DataLoader workers reach this dataset's draws (set once workers are served)
        self.draw_access: DrawAccess | None = None
        self._setup_runtime()

    @property
    def pins_batches(self) -> bool:
        """Whether batches are pinned (``pin_memory=True`` and an accelerator is there)."""
        return self._pin

    @property
    def batch_device(self) -> torch.device | None:
        """The device batches are copied to (None: they stay on the CPU)."""
        return self._device

    @property
    def worker_position(self) -> WorkerPosition:
        """This worker's position in its share of a pass (DataLoader worker processes)."""
        return self._worker

    def _setup_runtime(self) -> None:
        self._engine = _PassEngine(self)
        self._active: weakref.ref[_ReplayIterator] | None = None
        self._resume = False
        self._worker = WorkerPosition()
        self._draws: DrawService | None = None
        self._stats = _StatsSource(self._engine)
        self._stats_handle: RemovableHandle | None = self.buffer.register_stats_source(self._stats)
        weakref.finalize(self, self._stats_handle.remove)

    # ------------------------------------------------------------ iteration
    def __iter__(self) -> Any:
        _refuse_auto_batching(self, sys._getframe(1))
        info = get_worker_info()
        if info is not None:
            return _workers.iterate(self, self.draw_access, info)
        return _ReplayIterator(self, self._engine, self._activate)

    def __len__(self) -> int:
        if self.num_batches is None:
            raise TypeError(
                "this ReplayDataset has no length: without num_batches a pass lasts as long as "
                "its sampler decides; pass num_batches=... for a fixed-length pass."
            )
        return self.num_batches

    def dataloader(self, **kwargs: Any) -> StatefulDataLoader[Any]:
        """Return a ``torchdata.stateful_dataloader.StatefulDataLoader`` over this dataset.

        Args:
            **kwargs: StatefulDataLoader arguments (``num_workers``, ``pin_memory``,
                ``collate_fn``...). Batches come whole from the dataset, so the
                loader's ``batch_size`` is always None.

        Raises:
            ValueError: if ``batch_size`` is given (not None).
            RuntimeError: if ``num_workers > 0`` is not safe for this buffer.
        """
        from torchdata.stateful_dataloader import StatefulDataLoader

        if kwargs.pop("batch_size", None) is not None:
            raise ValueError(
                "dataloader() got a batch_size: the dataset already yields whole batches "
                f"(batch_size={self.batch_size}); set it on ReplayDataset instead."
            )
        if kwargs.get("num_workers", 0):
            _workers.check(self)
            self._serve_workers()
        return StatefulDataLoader(self, batch_size=None, **kwargs)

    # ------------------------------------------------------------ lifecycle
    def _activate(self, iterator: _ReplayIterator) -> bool:
        """Make ``iterator`` the one running passes (closing another); return the resume flag."""
        previous = None if self._active is None else self._active()
        if previous is not None and previous is not iterator:
            previous.close()
        self._active = weakref.ref(iterator)
        if self._stats_handle is None:
            self._stats_handle = self.buffer.register_stats_source(self._stats)
        resume, self._resume = self._resume, False
        return resume

    def close(self) -> None:
        """Stop the prefetch thread (pending batches are kept for the next pass)."""
        active = None if self._active is None else self._active()
        if active is not None:
            active.close()
        if self._stats_handle is not None:
            self._stats_handle.remove()
            self._stats_handle = None
        draws, self._draws = self._draws, None
        if draws is not None:
            draws.close()
            self.draw_access = None

    def _serve_workers(self) -> DrawAccess:
        """Draw for DataLoader workers from this process (started once; see ``close``)."""
        if self._draws is None:
            self._draws = DrawService(self._engine)
            self.draw_access = self._draws.access
            weakref.finalize(self, self._draws.close)
        return self._draws.access

    def __enter__(self) -> ReplayDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """What was handed out so far: sampler/RNG state, pending batches, pass position.

        Returns:
            Plain values and tensors (loadable with ``torch.load(weights_only=True)``).
        """
        if get_worker_info() is not None:
            return {"format": _STATE_FORMAT, "worker": self._worker.state_dict()}
        engine, buffer = self._engine, self.buffer
        with buffer.lock, engine.lock:
            state = engine.snapshot()
            if isinstance(buffer, SplitsDraws):  # a DDP rank's share: the global draws
                state = buffer.pass_state(state)
            else:
                state.update(buffer.sampling_state())
        state["format"] = _STATE_FORMAT
        state["rate_limiter"] = (
            None if self.rate_limiter is None else self.rate_limiter.state_dict()
        )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (load the buffer's contents first).

        The next iterator continues the saved pass: it hands out the saved
        pending batches (gathered again) first, then samples on from the
        saved sampler and RNG state. Missing keys keep their current values.

        Raises:
            TypeError: if ``state_dict`` is not a dict.
            ValueError: if an entry is malformed (nothing is changed then).
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}.")
        if "worker" in state_dict:
            self._worker.load_state_dict(state_dict["worker"])
            return
        engine, buffer = self._engine, self.buffer
        if isinstance(buffer, SplitsDraws):  # this rank's share of the saved global draws
            state_dict = {**state_dict, "pending": buffer.pending_of_rank(state_dict)}
        with engine.lock:
            current = engine.snapshot()
        state = {**current, **{k: v for k, v in state_dict.items() if k in current}}
        _validate_pass_state(state)
        self.close()
        with buffer.lock, engine.lock:
            buffer.load_sampling_state(state_dict)
            engine.restore(state)
        if self.rate_limiter is not None and state_dict.get("rate_limiter") is not None:
            self.rate_limiter.load_state_dict(state_dict["rate_limiter"])
        self._resume = True

    # ------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if spawning():  # a spawned DataLoader worker: refuse here, with the fork's message
            _workers.check(self)
            state["draw_access"] = self._serve_workers()
            state["buffer"] = _workers.worker_copy(self.buffer)
        for key in ("_engine", "_active", "_stats", "_stats_handle", "_resume", "_draws"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup_runtime()
        if self.rate_limiter is not None:
            self.rate_limiter.reattach(self.buffer)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(batch_size={self.batch_size}, num_batches={self.num_batches}, "
            f"prefetch={self.prefetch}, pin_memory={self.pin_memory}, device={self.device}, "
            f"min_size={self.min_size}, timeout={self.timeout})"
        )


class _ReplayIterator:
    """One pass of a ReplayDataset; lazy (nothing is sampled before the first ``next``)."""

    #: until the first ``next``: nothing to close (also on an iterator whose __init__ failed)
    _started = False
    _finished = True

    def __init__(
        self,
        dataset: ReplayDataset,
        engine: _PassEngine,
        activate: Callable[[_ReplayIterator], bool],
    ) -> None:
        self._ds = dataset
        self._engine = engine
        self._activate = activate  # makes this iterator the dataset's running one; resume flag
        self._prefetcher: _PrefetchThread | None = None
        self._stop = threading.Event()
        self._started = False
        self._finished = False

    def __iter__(self) -> _ReplayIterator:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        if not self._started:
            self._start()
        try:
            return self._next_prefetched() if self._prefetcher else self._next_inline()
        except StopIteration:
            interrupted = self._stop.is_set()  # closed from another thread: not the pass's end
            empty = self._engine.position == 0
            self.close()
            if not interrupted:
                self._engine.end_pass()
                if empty and not self._ds.allow_empty_pass:
                    raise _empty_pass_error(self._ds) from None
            raise
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        resume = self._activate(self)
        self._engine.begin_pass(resume)
        self._started = True
        if self._ds.prefetch:
            self._prefetcher = _PrefetchThread(self._engine, self._ds.prefetch)

    def _next_inline(self) -> Any:
        engine = self._engine
        with engine.lock:
            if engine.pass_over:
                raise StopIteration
            record: _Record | None = engine.pending[0] if engine.pending else None
        if record is None:
            record = engine.produce(self._stop)
            if record is None:
                raise StopIteration
        if record.batch is None:
            engine.gather(record, ahead=False)
        return engine.hand_out(record)

    def _next_prefetched(self) -> Any:
        engine = self._engine
        with engine.lock:
            while True:
                if engine.error is not None:
                    error, engine.error = engine.error, None
                    raise error
                if engine.pending and engine.pending[0].batch is not None:
                    record = engine.pending[0]
                    break
                if engine.pass_over or (engine.producer_done and not engine.pending):
                    raise StopIteration
                if self._stop.is_set():  # closed from another thread
                    raise StopIteration
                engine.wait()
        return engine.hand_out(record)

    def close(self) -> None:
        """Stop this pass's prefetch thread; batches sampled ahead stay pending."""
        self._finished = True
        self._stop.set()
        prefetcher, self._prefetcher = self._prefetcher, None
        if prefetcher is not None:
            prefetcher.close()
        self._engine.wake_waiters()

    def __del__(self) -> None:
        if self._started and not self._finished:
            self.close()


class _StatsSource:
    """Adds the loader's counters to ``buffer.stats()`` (holds the engine weakly)."""

    def __init__(self, engine: _PassEngine) -> None:
        self._engine = weakref.ref(engine)

    def __call__(self) -> dict[str, int]:
        engine = self._engine()
        if engine is None:
            return {}
        return {
            "loader_pending_batches": len(engine.pending),
            "loader_sampled_batches": engine.sampled_batches,
        }


def buffer_capacity(buffer: ServableBuffer) -> int | None:
    """The most items ``buffer`` can hold (None: unknown, e.g. a remote buffer)."""
    if isinstance(buffer, OfflineToOnlineReplayBuffer):
        return len(buffer.offline) + buffer.online.storage.max_size
    if isinstance(buffer, ReplayBuffer) and buffer.service_backend == "direct":
        return buffer.storage.max_size
    return None  # a remote buffer's storage lives elsewhere


def _fetcher_class() -> type[Any]:
    """The base class of the DataLoader's per-pass fetchers (torch's, private).

    Should a torch release move it, a class no object is of: the check never fires then.
    """
    try:
        from torch.utils.data._utils.fetch import _BaseDatasetFetcher
    except ImportError:  # pragma: no cover - depends on the torch release
        return type("_NoFetcher", (), {})
    return _BaseDatasetFetcher


_FETCHER = _fetcher_class()


def _refuse_auto_batching(ds: ReplayDataset, caller: Any) -> None:
    """Raise if a DataLoader that batches items (``batch_size`` not None) calls ``iter(ds)``.

    torch's DataLoader (and torchdata's StatefulDataLoader) build an
    ``_IterableDatasetFetcher`` per pass, whose ``__init__`` calls ``iter(dataset)``
    after recording ``auto_collation``; with auto-collation every whole batch the
    dataset yields would be wrapped in a batch of ``batch_size`` (shape ``[1, B]``
    with the default ``batch_size=1``). ``caller`` is the frame that called
    ``__iter__``.
    """
    fetcher = caller.f_locals.get("self") if caller is not None else None
    if isinstance(fetcher, _FETCHER) and fetcher.auto_collation:
        raise ValueError(
            f"DataLoader(ReplayDataset) got a batch_size (DataLoader's default is 1): "
            f"ReplayDataset already yields whole batches of {ds.batch_size} items, which the "
            f"DataLoader would batch again (shape [1, {ds.batch_size}]). Use "
            f"DataLoader(ds, batch_size=None), StatefulDataLoader(ds, batch_size=None) or "
            f"ds.dataloader(); set the batch size on ReplayDataset(batch_size=...)."
        )


def _empty_pass_error(ds: ReplayDataset) -> RuntimeError:
    return RuntimeError(
        f"this pass of ReplayDataset handed out no batch: the buffer holds {len(ds.buffer)} "
        f"items (write_count {ds.buffer.write_count}, min_size={ds.min_size}, "
        f"timeout={ds.timeout}) and nothing is left to sample. Fill the buffer before "
        f"training (offline_data=..., a collector), or set min_size=... (and timeout=...) so "
        f"that the loader waits for the collector instead of running an empty epoch."
    )


def _validate_pass_state(state: dict[str, Any]) -> None:
    if not isinstance(state["position"], int) or state["position"] < 0:
        raise ValueError(f"state_dict['position'] must be an int >= 0, got {state['position']!r}.")
    read_draw_records(state["pending"], "state_dict['pending']")


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return torch.cuda.is_available()
