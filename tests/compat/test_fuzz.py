"""Differential fuzzer: random programs of public operations, torchrl 0.14.1 vs rbdata.

Each example is a buffer configuration (storage, sampler, writer, transform,
batch size, consume-after-n, data form, ndim) and up to 12 operations (add,
extend of batches and lists, mismatched extends, sample with and without info,
indexing, item assignment, update_priority, empty, stats, state_dict and
dumps/loads round trips, iteration). Both libraries run it with the same seeds
and the same data; the outcome of every step (kinds, shapes, dtypes, full
contents, exception classes) and the state after it (len, write_count, writer
cursor, stored rows) must be equal, up to the documented differences of
``_fuzz_known.py``.

``RBDATA_FUZZ_EXAMPLES`` sets the number of examples (default 100, derandomized
so that CI is reproducible; any explicit value draws fresh random programs).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings

from ._fuzz_known import Step, known, leaves_comparable_states, normalized, raises
from ._fuzz_program import Config, programs
from ._fuzz_run import Program
from ._libs import load

_EXAMPLES = os.environ.get("RBDATA_FUZZ_EXAMPLES")


def compare(cfg: Config, ops: tuple[tuple[Any, ...], ...]) -> str | None:
    """Run the program on both libraries; None, or the documented reason it stopped early.

    Raises AssertionError at the first undocumented divergence.
    """
    with tempfile.TemporaryDirectory() as scratch:
        theirs = Program(load("torchrl"), cfg, Path(scratch)).run(ops)
        ours = Program(load("rbdata"), cfg, Path(scratch)).run(ops)
    before, mismatched = None, False
    for (op, t_out, t_state), (_, r_out, r_state) in zip(theirs, ours, strict=True):
        t_out, r_out = normalized(op, t_out), normalized(op, r_out)
        step = Step(cfg, op, before, t_out, r_out, r_state, t_state, mismatched)
        if t_out == r_out and t_state == r_state:
            reason = leaves_comparable_states(step)
            if reason is not None:
                return reason
            before = t_state
            mismatched |= op[0] == "extend_bad" and not raises(t_out)
            continue
        reason = known(step)
        if reason is not None:
            return reason
        raise AssertionError(
            f"divergence at {op!r}\n  torchrl: {t_out!r}\n           {t_state!r}\n"
            f"  rbdata:  {r_out!r}\n           {r_state!r}"
        )
    return None


@settings(
    max_examples=int(_EXAMPLES or 100),
    derandomize=_EXAMPLES is None,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(programs())
def test_programs_agree(program: tuple[Config, tuple[tuple[Any, ...], ...]]) -> None:
    """torchrl and rbdata agree on every step of a random program."""
    compare(*program)
