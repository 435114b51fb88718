"""ReplayCallback: priorities, policy version and buffer stats inside ``Trainer.fit``."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import lightning.pytorch as pl
import torch
from tensordict import TensorDictBase
from typing_extensions import override

from rbdata.buffers.protocol import ServableBuffer
from rbdata.policy_version import PolicyVersion

__all__ = ["ReplayCallback"]


@runtime_checkable
class _HoldsBuffer(Protocol):
    """A datamodule with a replay buffer (:class:`~rbdata.ReplayDataModule`, or the user's own)."""

    buffer: Any


class ReplayCallback(pl.Callback):
    """Connects a replay buffer to the training loop.

    After every training step (every batch, so it works with gradient
    accumulation and with manual optimization) the callback:

    1. reads new priorities from the step's output, ``outputs[priority_key]``
       (``training_step`` returned a dict holding them), else from
       ``batch[priority_key]``, and applies them to the sampled slots with
       ``buffer.update_batch_priority(batch, priority)``, which skips the slots
       rewritten since the batch was sampled (``batch["index_generation"]``);
    2. reads the policy version from the LightningModule and publishes it: to
       every :class:`~rbdata.transforms.PolicyAgeFilter` of the buffer (even one
       built with an int) and to :attr:`version`, a :class:`PolicyVersion`
       collectors can read to stamp their data;
    3. logs ``buffer.stats()`` under ``replay/...`` through the trainer's
       loggers and shows the buffer size in the progress bar.

    The published version is saved in checkpoints and restored on resume.

    Args:
        priority_key: the entry holding new priorities (one per sampled item,
            finite and >= 0). None disables priority updates. Buffers without a
            prioritized sampler ignore the updates.
        policy_version: where the policy version comes from. None: the module's
            ``policy_version`` attribute if it has one, else
            ``trainer.global_step``; a str: the name of a module attribute; a
            callable (a :class:`PolicyVersion` included): called with no
            argument. An attribute holding a callable is called.
        log_stats: log ``buffer.stats()`` every step (Lightning's
            ``log_every_n_steps`` decides what reaches the logger).
        buffer: the buffer to update; None uses ``trainer.datamodule.buffer``
            (a :class:`~rbdata.lightning.ReplayDataModule`).

    Raises:
        TypeError: for a ``priority_key`` that is not a str, or a ``policy_version``
            that is neither None, a str nor a callable.
        RuntimeError: at ``setup`` when no buffer is given and the datamodule has none.
        KeyError: after a step whose priorities were found but whose batch has no
            ``"index"``.
        ValueError: after a step whose priorities do not have the batch's shape
            (one per sampled item; a scalar is refused, not broadcast).
        AttributeError: when ``policy_version`` names an attribute the module lacks.

    Examples:
        >>> from rbdata import PolicyVersion
        >>> from rbdata.lightning import ReplayCallback
        >>> version = PolicyVersion()
        >>> callback = ReplayCallback(priority_key="td_error", policy_version=version)
        >>> callback.version is version
        True
    """

    def __init__(
        self,
        priority_key: str | None = "td_error",
        policy_version: str | Callable[[], int] | None = None,
        log_stats: bool = True,
        buffer: ServableBuffer | None = None,
    ) -> None:
        super().__init__()
        if priority_key is not None and not isinstance(priority_key, str):
            raise TypeError(f"priority_key must be a str or None, got {priority_key!r}.")
        if policy_version is not None and not (
            isinstance(policy_version, str) or callable(policy_version)
        ):
            raise TypeError(
                "policy_version must be None, a module attribute name (str) or a callable "
                f"returning an int, got {type(policy_version).__name__}."
            )
        self.priority_key = priority_key
        self.policy_version = policy_version
        self.log_stats = log_stats
        self._buffer_arg = buffer
        self._buffer: ServableBuffer | None = buffer
        self.version: PolicyVersion = (
            policy_version if isinstance(policy_version, PolicyVersion) else PolicyVersion()
        )
        self._warned_no_priority = False

    @property
    @override
    def state_key(self) -> str:
        """Where the checkpoint keeps this callback's state (two callbacks never collide)."""
        source = self.policy_version if isinstance(self.policy_version, str | None) else "callable"
        return self._generate_state_key(priority_key=self.priority_key, policy_version=source)

    @property
    def buffer(self) -> ServableBuffer:
        """The buffer this callback updates (resolved in ``setup``)."""
        if self._buffer is None:
            raise RuntimeError(
                "ReplayCallback has no buffer yet: pass buffer=... or run it in a Trainer "
                "whose datamodule has a .buffer (a ReplayDataModule), after setup."
            )
        return self._buffer

    # ------------------------------------------------------------------ hooks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Find the buffer (``buffer=`` or ``trainer.datamodule.buffer``)."""
        if self._buffer_arg is None:
            # Lightning sets trainer.datamodule at run time; Trainer's class does not declare it.
            datamodule = getattr(trainer, "datamodule", None)
            buffer = datamodule.buffer if isinstance(datamodule, _HoldsBuffer) else None
            if buffer is None:
                raise RuntimeError(
                    "ReplayCallback found no buffer: pass ReplayCallback(buffer=...) or fit with a "
                    f"datamodule that has a .buffer (got datamodule={datamodule!r})."
                )
            self._buffer = buffer

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Publish the (possibly restored) policy version before the first batch."""
        self._publish(trainer, pl_module)

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Apply the step's priorities, publish the policy version, log buffer stats."""
        self._update_priorities(outputs, batch)
        self._publish(trainer, pl_module)
        self._log(trainer, pl_module)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The last published policy version."""
        return {"policy_version": self.version()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the published policy version (and a PolicyVersion given as source)."""
        if "policy_version" in state_dict:
            self.version.set(int(state_dict["policy_version"]))

    # -------------------------------------------------------------- internals
    def _update_priorities(self, outputs: Any, batch: Any) -> None:
        if self.priority_key is None:
            return
        priority = _lookup(outputs, self.priority_key)
        if priority is None:
            priority = _lookup(batch, self.priority_key)
        if priority is None:
            if not self._warned_no_priority and self.buffer.prioritized:
                warnings.warn(
                    f"ReplayCallback: no {self.priority_key!r} in the training step's output nor "
                    "in the batch; priorities are not updated.",
                    stacklevel=2,
                )
                self._warned_no_priority = True
            return
        index = _lookup(batch, "index")
        if index is None:
            raise KeyError(
                f"ReplayCallback found priorities under {self.priority_key!r} but the batch has no "
                "'index' entry to apply them to; sample from an rbdata buffer (its batches carry "
                "'index')."
            )
        priority = torch.as_tensor(priority).detach().cpu()
        expected = tuple(batch.batch_size) if isinstance(batch, TensorDictBase) else index.shape
        if tuple(priority.shape) != tuple(expected):
            hint = (
                " (a scalar would give every sampled item the same priority: return one value "
                "per item, e.g. the per-item |TD error| before .mean())"
                if priority.ndim == 0
                else ""
            )
            raise ValueError(
                f"ReplayCallback: {self.priority_key!r} has shape {tuple(priority.shape)}, "
                f"expected {tuple(expected)}: one priority per sampled item{hint}."
            )
        self.buffer.update_batch_priority(batch, priority)

    def _read_version(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> int:
        source = self.policy_version
        if source is None:
            source = "policy_version" if hasattr(pl_module, "policy_version") else None
        if source is None:
            return int(trainer.global_step)
        if isinstance(source, str):
            if not hasattr(pl_module, source):
                raise AttributeError(
                    f"ReplayCallback(policy_version={source!r}): {type(pl_module).__name__} has no "
                    f"attribute {source!r}."
                )
            source = getattr(pl_module, source)
        value = source() if callable(source) else source
        return int(value)

    def _publish(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        version = self._read_version(trainer, pl_module)
        if self.version is not self.policy_version:
            self.version.set(version)
        self.buffer.publish_policy_version(version)

    def _log(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        to_logger = self.log_stats and bool(trainer.loggers)
        to_bar = trainer.progress_bar_callback is not None
        if not (to_logger or to_bar):
            return
        stats = self.buffer.stats() if to_logger else {"size": len(self.buffer)}
        metrics = {
            f"replay/{name}": float(value)
            for name, value in stats.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }
        size = metrics.pop("replay/size", float(len(self.buffer)))
        pl_module.log(
            "replay/size",
            size,
            prog_bar=to_bar,
            logger=to_logger,
            on_step=True,
            on_epoch=False,
            batch_size=1,
        )
        if to_logger and metrics:
            pl_module.log_dict(
                metrics, prog_bar=False, logger=True, on_step=True, on_epoch=False, batch_size=1
            )


def _lookup(container: Any, key: str) -> torch.Tensor | None:
    if isinstance(container, TensorDictBase):
        value: torch.Tensor | None = container.get(key, None)
        return value
    if isinstance(container, Mapping):
        return container.get(key)
    return None
