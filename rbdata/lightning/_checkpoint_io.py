"""Saving a replay buffer beside each Lightning checkpoint.

A :class:`_BufferCheckpointIO` wraps the strategy's ``CheckpointIO``. When a
checkpoint holds a :class:`ReplayDataModule` entry asking for it, the buffer is
dumped (``buffer.dumps``, atomic) into ``<ckpt file>.buffer-<id>`` beside the
checkpoint *before* the checkpoint itself is written (atomically too), and the
entry records that directory's name. So the newest complete checkpoint always
references a complete dump, whatever moment the process is killed at. Dumps no
checkpoint references any more are removed when their checkpoint is rewritten
or removed, and partial ones when the next checkpoint is saved.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, Protocol

from lightning.fabric.plugins import CheckpointIO

from rbdata.buffers.protocol import ServableBuffer

DUMPS_KEY = "buffer_dumps"  # the dump's directory name, relative to the checkpoint's directory
PATH_KEY = "buffer_path"  # its absolute path, added when the checkpoint is loaded
# Under DDP with a buffer per rank: every rank dumps its buffer into STAGING_KEY's folder
# (``rank<r>`` inside) while the checkpoint is made; rank 0 moves the folder beside the
# checkpoint, and RANKS_KEY then holds the number of ranks whose buffers it contains.
STAGING_KEY = "buffer_staging"
RANKS_KEY = "buffer_ranks"
STAGING_DIR = ".rbdata-rank-buffers"
_SUFFIX = ".buffer-"


class _BufferOwner(Protocol):
    """What this CheckpointIO needs from the data module: the buffer to dump."""

    @property
    def buffer(self) -> ServableBuffer: ...


class _BufferCheckpointIO(CheckpointIO):
    """A CheckpointIO that writes, finds and removes the buffer dump of each checkpoint."""

    def __init__(self, inner: CheckpointIO, datamodule: _BufferOwner) -> None:
        self.inner = inner
        self.datamodule = datamodule

    def _entry(self, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
        entry = checkpoint.get(type(self.datamodule).__qualname__)
        return entry if isinstance(entry, dict) and DUMPS_KEY in entry else None

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Dump the buffer beside ``path``, then save the checkpoint, then prune old dumps."""
        entry = self._entry(checkpoint)
        current = None
        if entry is not None:
            if "callbacks" not in checkpoint:  # a weights-only checkpoint cannot resume training
                checkpoint.pop(type(self.datamodule).__qualname__)
            else:
                target = Path(path)
                current = f"{target.name}{_SUFFIX}{uuid.uuid4().hex[:12]}"
                target.parent.mkdir(parents=True, exist_ok=True)
                staging = entry.pop(STAGING_KEY, None)
                if staging is not None:  # every rank dumped its own buffer there
                    shutil.move(staging, target.parent / current)
                else:
                    self.datamodule.buffer.dumps(target.parent / current)
                entry[DUMPS_KEY] = current
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        if current is not None:
            _prune(Path(path), keep=current)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Load the checkpoint and resolve its buffer dump to an absolute path."""
        checkpoint = self.inner.load_checkpoint(path, *args, **kwargs)
        entry = self._entry(checkpoint)
        if entry is not None and entry[DUMPS_KEY] is not None:
            entry[PATH_KEY] = str(Path(path).resolve().parent / entry[DUMPS_KEY])
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        """Remove the checkpoint and its buffer dumps."""
        self.inner.remove_checkpoint(path)
        _prune(Path(path), keep=None)

    def teardown(self) -> None:
        """Tear down the wrapped CheckpointIO."""
        self.inner.teardown()


def _prune(path: Path, keep: str | None) -> None:
    """Remove the dumps of checkpoint ``path`` but ``keep``, and leftovers beside it.

    Leftovers are dumps whose checkpoint file does not exist (the process was
    killed between the two writes, or the checkpoint was deleted by hand) and
    ``.<name>...`` directories (dumps interrupted before their final rename).
    Checkpoints are saved one at a time, so none of these is in use.
    """
    folder = path.parent
    if not folder.is_dir():
        return
    for child in folder.iterdir():
        if _SUFFIX not in child.name or child.name == keep or not child.is_dir():
            continue
        owner = child.name.split(_SUFFIX, 1)[0]
        if child.name.startswith(".") or owner == path.name or not (folder / owner).exists():
            shutil.rmtree(child, ignore_errors=True)
