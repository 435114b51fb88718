"""Writers: which storage slots new data goes to."""

from rbdata.writers._base import Writer
from rbdata.writers.ensemble import WriterEnsemble
from rbdata.writers.immutable import ImmutableDatasetWriter
from rbdata.writers.max_value import TensorDictMaxValueWriter
from rbdata.writers.round_robin import RoundRobinWriter, TensorDictRoundRobinWriter

__all__ = [
    "ImmutableDatasetWriter",
    "RoundRobinWriter",
    "TensorDictMaxValueWriter",
    "TensorDictRoundRobinWriter",
    "Writer",
    "WriterEnsemble",
]
