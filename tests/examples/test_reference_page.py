"""Every example of torchrl's ReplayBuffer reference page, run verbatim with rbdata imports.

The examples are the page's ``>>>`` blocks, copied as they are into
``data/replay_buffer_page_examples.txt``. Each block runs statement by
statement as the interactive interpreter would (expression values printed),
with ``torchrl.data`` (and its ``replay_buffers.samplers`` module) pointed at
``rbdata``; where the page shows output, the output must be the same.

The page's blocks assume the names its other examples import: each block runs
in a namespace holding ``torch``, ``TensorDict`` and rbdata's public names. The
``rb.query(...)`` example runs on a buffer of trajectories that passes its
predicate (the page does not build one).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

import rbdata

PAGE = Path(__file__).with_name("data") / "replay_buffer_page_examples.txt"
_IMPORTS = (
    ("torchrl.data.replay_buffers.samplers", "rbdata"),
    ("torchrl.data", "rbdata"),
)


def _blocks() -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            current = blocks.setdefault(line[3:], [])
        elif current is not None and line:
            current.append(line)
    return blocks


def _statements(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``(source, expected output lines)`` per prompt, as an interactive session reads them.

    A ``>>>`` line whose code is indented continues the statement before it (the
    page writes one function body line that way).
    """
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith(">>>"):
            code = line[4:] if line.startswith(">>> ") else line[3:]
            if code[:1].isspace() and out:
                source, expected = out[-1]
                out[-1] = (source + "\n" + code, expected)
            else:
                out.append((code, []))
        elif line.startswith("..."):
            source, expected = out[-1]
            out[-1] = (
                source + "\n" + (line[4:] if line.startswith("... ") else line[3:]),
                expected,
            )
        else:
            out[-1][1].append(line)
    return out


def _swap(source: str) -> str:
    for old, new in _IMPORTS:
        source = source.replace(old, new)
    return source


def _namespace() -> dict[str, Any]:
    names: dict[str, Any] = {name: getattr(rbdata, name) for name in rbdata.__all__}
    names.update(torch=torch, TensorDict=TensorDict, __name__="__page__")
    return names


def _episodes_buffer() -> rbdata.TensorDictReplayBuffer:
    """A buffer whose first trajectory has a reward sum over 100 and 50 steps or more."""
    rb = rbdata.TensorDictReplayBuffer(storage=rbdata.LazyTensorStorage(200))
    n = 60
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[-1] = True
    rb.extend(
        TensorDict(
            {
                "observation": torch.arange(n, dtype=torch.float32).unsqueeze(-1),
                "reward": torch.full((n, 1), 2.0),
                ("next", "done"): done,
            },
            [n],
        )
    )
    return rb


def _run(block: str, lines: list[str], tmp_path: Path) -> None:
    names = _namespace()
    if "rb.query(" in "\n".join(lines) and "rb = " not in "\n".join(lines):
        names["rb"] = _episodes_buffer()
    for source, expected in _statements(lines):
        code = _swap(source)
        if all(not line.strip() or line.strip().startswith("#") for line in code.splitlines()):
            continue  # a comment alone: the interpreter reads nothing
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(code + "\n", f"<page {block}>", "single"), names)  # noqa: S102
        if expected:
            got = [line.rstrip() for line in buffer.getvalue().splitlines()]
            want = [re.sub(r"\s+", " ", line).strip() for line in expected]
            assert [re.sub(r"\s+", " ", line).strip() for line in got] == want, (
                f"{block}: {source!r} printed {got}, the page shows {expected}"
            )


@pytest.mark.parametrize("block", list(_blocks()))
def test_page_example(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anything an example writes lands in the test's temp dir
    monkeypatch.setenv("TQDM_DISABLE", "1")
    _run(block, _blocks()[block], tmp_path)


def test_every_block_of_the_page_is_here() -> None:
    blocks = _blocks()
    assert len(blocks) == 10
    assert sum(len(_statements(lines)) for lines in blocks.values()) >= 60
    assert os.fspath(PAGE).endswith(".txt")
