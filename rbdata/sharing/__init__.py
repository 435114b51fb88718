"""Everything past one process, beneath the buffer: shared rows, counters, the lock, the feed.

A buffer shared between processes (``share()``, torchrl's ``shared=True``,
a same-node Ray client) keeps its rows and counters in shared memory and
takes one cross-process lock. This package owns that machinery, so that the
storages, samplers, writers and the buffer know nothing of semaphores,
segments, pids or memory ordering:

- :mod:`.counters`: the components' counters (length, cursor, write count);
- :mod:`.segments`: row memory reserved sparse, private or shared;
- :mod:`.rendezvous`: where processes sharing a storage not written yet meet;
- :mod:`.lock`: the cross-process lock, its version (lock-free reads);
- :mod:`.in_flight`: rows reserved writers copy outside the lock;
- :mod:`.reserved_write`: reserve under the lock, copy outside it;
- :mod:`.eligibility`: which writes and draws may skip the lock;
- :mod:`.feed`: the committed writes each process's sampler follows;
- :mod:`.sync`: the buffer's guards (:class:`~.sync._BufferSync`);
- :mod:`.handle`: export/attach of a shared buffer by name;
- :mod:`.slot_ring`: the Ray transport's shared slots;
- :mod:`.parts`: the other parts of a buffer when it is shared;
- :mod:`.components`: what the layer calls on storages, writers, samplers,
  sample units and transforms, as protocols (it imports none of them);
- :mod:`.ring`: the slots of a ring write.

The protocol and its invariants are described in ``docs/internals.md``.
Submodules are imported where used (this package imports nothing, so the
storages can take their counters from it).
"""
