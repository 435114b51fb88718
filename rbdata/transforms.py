"""Transforms applied on the sample path (forward) and the extend path (inverse)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key

__all__ = ["Compose", "PolicyAgeFilter", "Transform"]


class Transform:
    """Base class of replay-buffer transforms.

    ``forward`` runs on every sample, ``inv`` on every extend (before the data
    is written). Both default to the identity, so a subclass overrides the
    direction it needs. Row filters (which may drop rows of a batch) set the
    class attribute ``filters_rows = True``; the buffer and the data loader
    re-apply such filters when a prefetched batch is handed out.

    Args:
        in_keys: the entries ``forward`` reads (a key or a sequence of keys;
            None: not declared).
        out_keys: the entries ``forward`` writes (None: not declared). With both
            declared, :meth:`ReplayBuffer.query <rbdata.ReplayBuffer.query>`
            skips the transform while evaluating a predicate that does not read
            what it writes.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, Transform
        >>> class Double(Transform):
        ...     def forward(self, data):
        ...         return data.set("x", data["x"] * 2)
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=Double())
        >>> _ = rb.extend(TensorDict({"x": torch.ones(4)}, [4]))
        >>> rb.sample(2)["x"].tolist()
        [2.0, 2.0]
    """

    filters_rows: bool = False
    #: Whether :meth:`inv` keeps write state that every writing process must see: a
    #: shared buffer (``shared=True``) then calls :meth:`share_memory_`, which such a
    #: transform overrides.
    requires_shared_write_state: bool = False
    #: Entries ``forward`` reads / writes (None: not declared); queries use them to run only
    #: the transforms a predicate depends on.
    in_keys: list[NestedKey] | None = None
    out_keys: list[NestedKey] | None = None

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if in_keys is not None:
            self.in_keys = _key_list(in_keys, "in_keys")
        if out_keys is not None:
            self.out_keys = _key_list(out_keys, "out_keys")

    def forward(self, data: Any) -> Any:
        """Transform a sampled batch."""
        return data

    def inv(self, data: Any) -> Any:
        """Transform data about to be written."""
        return data

    def __call__(self, data: Any) -> Any:
        """Apply :meth:`forward` (the sample path)."""
        return self.forward(data)

    def state_dict(self) -> dict[str, Any]:
        """The transform's state (none by default; stateful transforms override both)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""

    def share_memory_(self) -> Transform:
        """Move the write state into shared memory (a shared buffer calls it); return self.

        A transform without write state has nothing to move. One that declares
        ``requires_shared_write_state`` overrides this method.

        Raises:
            RuntimeError: for a transform that declares ``requires_shared_write_state``
                but does not override this method.
        """
        if self.requires_shared_write_state:
            raise RuntimeError(
                f"{type(self).__name__} keeps replay-buffer write state but does not "
                "implement share_memory_(): a shared buffer cannot use it. Use a writer in one "
                "process, or a transform whose write state can be shared."
            )
        return self


def _key_list(keys: NestedKey | Sequence[NestedKey], name: str) -> list[NestedKey]:
    """``keys`` (one key or a sequence of keys) as a list of normalized keys."""
    if isinstance(keys, str | tuple):
        keys = [keys]
    return [normalize_key(k, name) for k in keys]


class _CallableTransform(Transform):
    """A plain callable used as a transform on one path."""

    def __init__(self, fn: Callable[[Any], Any], *, invert: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"a transform must be callable, got {type(fn).__name__}.")
        self.fn = fn
        self.invert = invert

    def forward(self, data: Any) -> Any:
        return data if self.invert else self.fn(data)

    def inv(self, data: Any) -> Any:
        return self.fn(data) if self.invert else data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fn!r}, invert={self.invert})"


class _ForeignTransform(_CallableTransform):
    """A callable with its own ``inv`` (torchrl's env transforms): ``inv`` runs on extend.

    torchrl's buffers call ``transform.inv(data)`` on every extend; so does this wrapper.
    """

    def forward(self, data: Any) -> Any:
        return self.fn.inv(data) if self.invert else self.fn(data)  # type: ignore[attr-defined]

    def inv(self, data: Any) -> Any:
        return self.fn(data) if self.invert else self.fn.inv(data)  # type: ignore[attr-defined]


class _Inverted(Transform):
    """A Transform whose directions are swapped (``append_transform(t, invert=True)``)."""

    def __init__(self, transform: Transform) -> None:
        self.transform = transform
        self.filters_rows = transform.filters_rows

    def forward(self, data: Any) -> Any:
        return self.transform.inv(data)

    def inv(self, data: Any) -> Any:
        return self.transform.forward(data)


@runtime_checkable
class _Invertible(Protocol):
    """A callable with its own inverse (torchrl's env transforms): ``inv`` runs on extend."""

    def __call__(self, data: Any) -> Any: ...

    def inv(self, data: Any) -> Any: ...


def as_transform(fn: Transform | Callable[[Any], Any], *, invert: bool = False) -> Transform:
    """Wrap ``fn`` into a :class:`Transform`, swapping its directions if ``invert``."""
    if isinstance(fn, Transform):
        return _Inverted(fn) if invert else fn
    if isinstance(fn, _Invertible):
        return _ForeignTransform(fn, invert=invert)
    return _CallableTransform(fn, invert=invert)


class Compose(Transform):
    """Chains transforms: ``forward`` in order, ``inv`` in reverse order.

    Args:
        *transforms: transforms or plain callables (used on the sample path).

    Examples:
        >>> from rbdata import Compose
        >>> t = Compose(lambda x: x + 1, lambda x: x * 10)
        >>> t(1)
        20
    """

    def __init__(self, *transforms: Transform | Callable[[Any], Any]) -> None:
        self.transforms: list[Transform] = [as_transform(t) for t in transforms]

    # Derived from the chain: a read-only property where Transform has a plain attribute.
    @property
    def filters_rows(self) -> bool:  # type: ignore[override]
        """Whether any transform of the chain may drop rows."""
        return any(t.filters_rows for t in self.transforms)

    def forward(self, data: Any) -> Any:
        """Apply every transform's ``forward`` in order."""
        for t in self.transforms:
            data = t.forward(data)
        return data

    def inv(self, data: Any) -> Any:
        """Apply every transform's ``inv`` in reverse order."""
        for t in reversed(self.transforms):
            data = t.inv(data)
        return data

    def state_dict(self) -> dict[str, Any]:
        """Each transform's state, under its position in the chain."""
        return {str(i): t.state_dict() for i, t in enumerate(self.transforms)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (entries of transforms not in the chain ignored)."""
        for i, t in enumerate(self.transforms):
            if str(i) in state_dict:
                t.load_state_dict(state_dict[str(i)])

    def share_memory_(self) -> Compose:
        """Move every transform's write state into shared memory (see ``Transform``).

        Raises:
            RuntimeError: for a transform of the chain that keeps write state it cannot share.
        """
        for t in self.transforms:
            t.share_memory_()
        return self

    def append(self, transform: Transform) -> None:
        """Add a transform at the end of the chain."""
        self.transforms.append(transform)

    def insert(self, index: int, transform: Transform) -> None:
        """Insert a transform at ``index``."""
        self.transforms.insert(index, transform)

    def row_filters(self) -> Iterator[Transform]:
        """The transforms (nested ones included) that may drop rows on the sample path."""
        for t in self.transforms:
            inner = t.transform if isinstance(t, _Inverted) else t
            if isinstance(inner, Compose):
                yield from inner.row_filters()
            elif t.filters_rows:
                yield t

    def refilter(self, data: Any) -> Any:
        """Re-apply only the sample-path row filters (used when prefetched data is handed out)."""
        for t in self.row_filters():
            data = t.forward(data)
        return data

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, index: int) -> Transform:
        return self.transforms[index]

    def __repr__(self) -> str:
        return f"Compose({', '.join(map(repr, self.transforms))})"


class PolicyAgeFilter(Transform):
    """Drops data produced by a behaviour policy that is too old.

    Elements whose stamped version lags the live version by more than
    ``max_policy_lag`` are dropped: on ``extend`` (inverse path) stale elements
    never enter the buffer; on ``sample`` (forward path) elements that became
    stale since insertion are dropped, so a batch may be smaller than asked.

    Args:
        current_version: the live policy version, an int (frozen) or a
            callable returning it (re-evaluated on every pass). A version
            published with :meth:`set_current_version` (e.g. by
            ``ReplayCallback``) takes precedence over both.
        max_policy_lag: the largest allowed ``current_version - stamped_version``.
        policy_version_key: entry carrying the stamped version.
        strict: if True, data without ``policy_version_key`` raises a KeyError;
            otherwise it passes unfiltered with a one-time warning.

    Raises:
        KeyError: with ``strict=True``, for data without the version entry.
        TypeError: for data that is not a TensorDict, or a ``max_policy_lag``
            that is not an int.
        ValueError: for a negative ``max_policy_lag``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyStackStorage, PolicyAgeFilter, ReplayBuffer
        >>> current_version = 3
        >>> rb = ReplayBuffer(
        ...     storage=LazyStackStorage(100),
        ...     transform=PolicyAgeFilter(lambda: current_version, max_policy_lag=1),
        ... )
        >>> data = TensorDict(
        ...     {"observation": torch.randn(4, 3), "policy_version": torch.tensor([0, 2, 2, 3])},
        ...     batch_size=[4],
        ... )
        >>> indices = rb.extend(data)
        >>> len(rb)
        3
    """

    filters_rows = True

    def __init__(
        self,
        current_version: int | Callable[[], int],
        max_policy_lag: int,
        *,
        policy_version_key: NestedKey = "policy_version",
        strict: bool = False,
    ) -> None:
        if not (callable(current_version) or isinstance(current_version, int)):
            raise TypeError(
                "current_version must be an int or a callable returning an int, got "
                f"{type(current_version).__name__}."
            )
        if isinstance(max_policy_lag, bool) or not isinstance(max_policy_lag, int):
            raise TypeError(
                f"max_policy_lag must be a non-negative int, got "
                f"{type(max_policy_lag).__name__} ({max_policy_lag!r})."
            )
        if max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be a non-negative int, got {max_policy_lag}.")
        self.current_version = current_version
        self.max_policy_lag = max_policy_lag
        self.policy_version_key = policy_version_key
        self.strict = strict
        self._published: int | None = None
        self._warned = False

    def set_current_version(self, version: int | None) -> None:
        """Publish the live version (overrides ``current_version``; None un-publishes)."""
        self._published = None if version is None else int(version)

    def version(self) -> int:
        """The live policy version used for filtering."""
        if self._published is not None:
            return self._published
        cv = self.current_version
        return int(cv() if callable(cv) else cv)

    def keep_mask(self, data: TensorDictBase) -> torch.Tensor | None:
        """Boolean mask of the rows fresh enough to keep (None: no version entry, keep all).

        A row of ``[B, T, ...]`` data is kept only if all its elements are fresh
        enough (its oldest element decides).
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"PolicyAgeFilter filters TensorDicts, got {type(data).__name__}; store "
                "TensorDicts to filter by policy age."
            )
        stamped: torch.Tensor | None = data.get(self.policy_version_key, None)
        if stamped is None:
            if self.strict:
                raise KeyError(
                    f"PolicyAgeFilter: policy_version_key {self.policy_version_key!r} is "
                    "missing from the data "
                    f"(keys: {sorted(map(str, data.keys(True, True)))}) and strict=True."
                )
            if not self._warned:
                warnings.warn(
                    f"PolicyAgeFilter: data has no {self.policy_version_key!r} entry; "
                    "passing it through unfiltered.",
                    stacklevel=3,
                )
                self._warned = True
            return None
        batch_dims = len(data.batch_size)
        if stamped.ndim > batch_dims:  # e.g. [N, 1]: one stamp per element
            stamped = stamped.flatten(batch_dims)[..., 0]
        fresh = (self.version() - stamped) <= self.max_policy_lag
        if batch_dims > 1:  # [B, T] rows: one stale element (the oldest) makes the row stale
            fresh = fresh.reshape(fresh.shape[0], -1).all(-1)
        return fresh

    def _filter(self, data: TensorDictBase) -> TensorDictBase:
        mask = self.keep_mask(data)
        if mask is None or bool(mask.all()):
            return data
        return data[mask]

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        """Drop stale elements from a sampled batch (replay-buffer read path)."""
        return self._filter(data)

    def inv(self, data: TensorDictBase) -> TensorDictBase:
        """Drop stale elements before they are written (replay-buffer write path)."""
        return self._filter(data)

    def __repr__(self) -> str:
        return (
            f"PolicyAgeFilter(max_policy_lag={self.max_policy_lag}, "
            f"policy_version_key={self.policy_version_key!r}, strict={self.strict})"
        )
