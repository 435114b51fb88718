"""Parameter schedulers: anneal a sampler's parameter (``alpha``, ``beta``, ...) step by step."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import torch

from rbdata._component.checks import check_int
from rbdata.samplers._base import Sampler

__all__ = [
    "LambdaScheduler",
    "LinearScheduler",
    "ParameterScheduler",
    "SchedulerList",
    "StepScheduler",
]

Number = int | float | torch.Tensor


@runtime_checkable
class _HoldsSampler(Protocol):
    """A replay buffer, as a scheduler sees it: it holds a sampler."""

    @property
    def sampler(self) -> Any: ...


def _sampler_of(obj: Any) -> Sampler:
    if isinstance(obj, Sampler):
        return obj
    sampler = obj.sampler if isinstance(obj, _HoldsSampler) else None
    if isinstance(sampler, Sampler):
        return sampler
    raise TypeError(
        f"a scheduler adjusts a Sampler: pass a replay buffer or a Sampler, got "
        f"{type(obj).__name__}."
    )


class ParameterScheduler(abc.ABC):
    """Base class: sets ``sampler.<param_name>`` to a new value at every :meth:`step`.

    Subclasses compute the value in ``_step()`` from the step count; the base
    clips it to ``[min_value, max_value]`` and assigns it (a PrioritizedSampler
    re-transforms its stored priorities when ``alpha`` changes).

    Args:
        obj: a replay buffer (its sampler is adjusted) or a Sampler.
        param_name: the attribute to adjust, e.g. ``"beta"``.
        min_value: lower bound of the value (None: none).
        max_value: upper bound of the value (None: none).

    Raises:
        TypeError: if ``obj`` is neither a replay buffer nor a Sampler.
        ValueError: if the sampler has no attribute ``param_name``.

    Examples:
        >>> from rbdata import PrioritizedSampler
        >>> from rbdata.samplers.schedulers import LinearScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.7, beta=0.4)
        >>> scheduler = LinearScheduler(sampler, "beta", final_value=1.0, num_steps=3)
        >>> for _ in range(4):
        ...     scheduler.step()
        >>> round(sampler.beta, 6)
        1.0
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        self.sampler = _sampler_of(obj)
        if not hasattr(self.sampler, param_name):
            raise ValueError(
                f"{type(self.sampler).__name__} has no attribute {param_name!r} to schedule."
            )
        self.param_name = param_name
        self._min_val = -float("inf") if min_value is None else min_value
        self._max_val = float("inf") if max_value is None else max_value
        initial = getattr(self.sampler, param_name)
        self.initial_val: Number = initial.clone() if isinstance(initial, torch.Tensor) else initial
        self._step_cnt = 0

    @property
    def value(self) -> Number:
        """The parameter's current value."""
        current: Number = getattr(self.sampler, self.param_name)
        return current

    def step(self) -> None:
        """Advance one step and assign the new (clipped) value."""
        self._step_cnt += 1
        value = self._step()
        if isinstance(value, torch.Tensor):
            value = value.clamp(self._min_val, self._max_val)
        else:
            value = min(max(value, self._min_val), self._max_val)
        setattr(self.sampler, self.param_name, value)

    @abc.abstractmethod
    def _step(self) -> Number:
        """The value after ``self._step_cnt`` steps (before clipping)."""

    def state_dict(self) -> dict[str, Any]:
        """The step count and the schedule's settings (not the sampler)."""
        return {k: v for k, v in self.__dict__.items() if k != "sampler" and not callable(v)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (unknown keys are ignored)."""
        for key, value in state_dict.items():
            if key in self.__dict__ and key != "sampler":
                setattr(self, key, value)


class LambdaScheduler(ParameterScheduler):
    """The initial value times ``lambda_fn(step_count)`` (as ``torch.optim.LambdaLR``).

    Examples:
        >>> from rbdata import PrioritizedSampler
        >>> from rbdata.samplers.schedulers import LambdaScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.8, beta=0.5)
        >>> LambdaScheduler(sampler, "alpha", lambda n: 0.5**n).step()
        >>> sampler.alpha
        0.4
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        lambda_fn: Callable[[int], float],
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__(obj, param_name, min_value, max_value)
        if not callable(lambda_fn):
            raise TypeError(f"lambda_fn must be callable, got {type(lambda_fn).__name__}.")
        self.lambda_fn = lambda_fn

    def _step(self) -> Number:
        return self.initial_val * self.lambda_fn(self._step_cnt)


class LinearScheduler(ParameterScheduler):
    """Linear interpolation from the initial value to ``final_value`` over ``num_steps`` steps.

    Examples:
        >>> from rbdata import PrioritizedSampler
        >>> from rbdata.samplers.schedulers import LinearScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
        >>> scheduler = LinearScheduler(sampler, "beta", final_value=1.0, num_steps=4)
        >>> scheduler.step(); round(sampler.beta, 6)
        0.7
    """

    def __init__(self, obj: Any, param_name: str, final_value: float, num_steps: int) -> None:
        super().__init__(obj, param_name)
        self.num_steps = check_int(num_steps, "num_steps", minimum=1)
        final: Number = final_value
        if isinstance(self.initial_val, torch.Tensor):
            final = torch.as_tensor(final_value).to(self.initial_val)
        self.final_val = final
        self._delta = (self.final_val - self.initial_val) / self.num_steps

    def _step(self) -> Number:
        if self._step_cnt >= self.num_steps:
            return self.final_val
        return self.initial_val + self._delta * self._step_cnt


class StepScheduler(ParameterScheduler):
    """Every ``n_steps`` steps, multiply the value by ``gamma`` (or add it, ``mode="additive"``).

    Examples:
        >>> from rbdata import PrioritizedSampler
        >>> from rbdata.samplers.schedulers import StepScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
        >>> scheduler = StepScheduler(sampler, "beta", gamma=0.1, mode="additive", max_value=0.8)
        >>> for _ in range(3):
        ...     scheduler.step()
        >>> round(sampler.beta, 6)
        0.8
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        gamma: float = 0.9,
        n_steps: int = 1,
        mode: str = "multiplicative",
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__(obj, param_name, min_value, max_value)
        if mode not in ("multiplicative", "additive"):
            raise ValueError(f"Invalid mode: {mode!r}. Choose 'multiplicative' or 'additive'.")
        self.gamma = gamma
        self.n_steps = check_int(n_steps, "n_steps", minimum=1)
        self.mode = mode

    def _step(self) -> Number:
        current = self.value
        if self._step_cnt % self.n_steps:
            return current
        return current + self.gamma if self.mode == "additive" else current * self.gamma


class SchedulerList:
    """Several schedulers stepped together.

    Examples:
        >>> from rbdata import PrioritizedSampler
        >>> from rbdata.samplers.schedulers import LinearScheduler, SchedulerList, StepScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
        >>> both = SchedulerList([LinearScheduler(sampler, "beta", 1.0, 2),
        ...                       StepScheduler(sampler, "alpha", gamma=0.5)])
        >>> both.step(); round(sampler.beta, 6), round(sampler.alpha, 6)
        (0.8, 0.35)
    """

    def __init__(self, schedulers: ParameterScheduler | Iterable[ParameterScheduler]) -> None:
        if isinstance(schedulers, ParameterScheduler):
            schedulers = [schedulers]
        self.schedulers: list[ParameterScheduler] = list(schedulers)

    def append(self, scheduler: ParameterScheduler) -> None:
        """Add a scheduler."""
        self.schedulers.append(scheduler)

    def step(self) -> None:
        """Step every scheduler, in order."""
        for scheduler in self.schedulers:
            scheduler.step()
