"""Samplers: which slots of the storage a batch reads."""

from rbdata.samplers._base import Sampler
from rbdata.samplers.consuming import ConsumingSampler
from rbdata.samplers.ensemble import SamplerEnsemble
from rbdata.samplers.prioritized import PrioritizedSampler
from rbdata.samplers.prioritized_slice import PrioritizedSliceSampler
from rbdata.samplers.prompt_group import PromptGroupSampler
from rbdata.samplers.random import RandomSampler
from rbdata.samplers.slice import SliceSampler
from rbdata.samplers.slice_without_replacement import SliceSamplerWithoutReplacement
from rbdata.samplers.staleness import StalenessAwareSampler
from rbdata.samplers.streaming_slice import StreamingSliceSampler
from rbdata.samplers.without_replacement import SamplerWithoutReplacement

# a sampler without replacement of slices (drop_last, shuffle, ran_out, passes), as torchrl's
# class is: isinstance(SliceSamplerWithoutReplacement(...), SamplerWithoutReplacement) holds
SamplerWithoutReplacement.register(SliceSamplerWithoutReplacement)

__all__ = [
    "ConsumingSampler",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "Sampler",
    "SamplerEnsemble",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
    "StreamingSliceSampler",
]
