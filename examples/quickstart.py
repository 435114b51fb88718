"""rbdata in 30 lines: extend, sample, iterate, save and load; then a prioritized buffer."""

import tempfile

import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer

torch.manual_seed(0)
data = TensorDict({"obs": torch.randn(1000, 4), "reward": torch.randn(1000, 1)}, batch_size=[1000])

rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10_000), batch_size=32)
rb.extend(data)  # one write of 1000 transitions
batch = rb.sample()  # a TensorDict of 32 rows, with "index"
print(f"{len(rb)} stored; sampled {batch.batch_size[0]} rows with keys {sorted(batch.keys())}")
for i, batch in zip(range(3), rb, strict=False):  # iterating samples batch after batch
    print(f"batch {i}: first indices {batch['index'][:4].tolist()}")

with tempfile.TemporaryDirectory() as path:  # save and load the whole buffer
    rb.dumps(path)
    restored = TensorDictReplayBuffer(storage=LazyTensorStorage(10_000), batch_size=32)
    restored.loads(path)
    print(f"restored {len(restored)} items, same content: {(restored[:] == rb[:]).all()}")

prb = TensorDictPrioritizedReplayBuffer(
    alpha=0.7, beta=0.5, storage=LazyTensorStorage(10_000), batch_size=32
)
prb.extend(data)
for _, batch in zip(range(200), prb, strict=False):  # learn, then re-prioritize what was sampled
    batch["td_error"] = batch["reward"].abs().squeeze(-1)  # stands in for a TD error
    prb.update_tensordict_priority(batch)
batch = prb.sample()  # large errors come more often, "priority_weight" corrects
weight = batch["priority_weight"]
print(
    f"mean |reward| {batch['reward'].abs().mean():.2f} sampled, {data['reward'].abs().mean():.2f}"
    f" overall; importance weights {weight.min():.2f}..{weight.max():.2f}"
)
