"""The on-disk format of ``ReplayBuffer.dumps`` / ``loads``: crash-safe, checked, pickle-free.

A dump is a directory::

    path/
      manifest.json   format version, byte order, components, max_size, length,
                      cursor, write_count, spec, capacities (slots of the
                      generations and priorities, storage ndim), the
                      generator's device, the state tree (plain values
                      inline, tensors by file) and each data file's dtype, shape,
                      size and xxh3 checksum
      data-<id>/      one raw file per tensor (``<n>.bin``); ``objects.pkl``
                      only for list-storage objects JSON cannot describe

Writing (:func:`write_dump`) happens beside ``path`` and ends with one atomic
swap, so a crash at any moment leaves the old or the new dump, complete.
Reading (:func:`read_dump`, :func:`verify_dump`) trusts nothing: only files
the manifest names are read, sizes and checksums are checked before anything
is decoded, the manifest's counts against the data, the components' sections
the way their ``load_state_dict`` checks them (so ``rbdata verify`` rejects
what ``loads`` rejects, with the same message), and nothing is unpickled
unless ``allow_pickle=True``. Every problem is one :class:`CheckpointError`
naming the file.

:func:`load_tensordict_dir` opens a memory-mapped TensorDict directory from
elsewhere (an offline dataset, part of a torchrl dump) without letting
tensordict unpickle anything.
"""

from rbdata.errors import CheckpointError

from ._dump_paths import FORMAT_VERSION, MANIFEST
from ._tensordict_dir import TENSORDICT_REFUSES_PICKLES, load_tensordict_dir, refuse_pickles
from ._verify import read_dump, verify_dump
from ._write import write_dump

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "TENSORDICT_REFUSES_PICKLES",
    "CheckpointError",
    "load_tensordict_dir",
    "read_dump",
    "refuse_pickles",
    "verify_dump",
    "write_dump",
]
