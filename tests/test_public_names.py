"""``rbdata``'s public names: one lazy table, the same names for type checkers and ``__all__``."""

from __future__ import annotations

import ast
from pathlib import Path

import rbdata

INIT = Path(rbdata.__file__)


def _type_checking_imports() -> dict[str, str]:
    tree = ast.parse(INIT.read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_the_lazy_table_names_every_public_name_once():
    table = rbdata._LAZY
    assert set(table) == set(rbdata.__all__) and len(rbdata.__all__) == len(set(rbdata.__all__))


def test_type_checkers_see_what_first_use_imports():
    imports = _type_checking_imports()
    extras = {name for name, (_, extra) in rbdata._LAZY.items() if extra is not None}
    for name, module in imports.items():
        assert rbdata._LAZY[name][0] == module, name
    assert set(imports) | extras | {
        "ReplayDataset",
        "SampleToInsertRatio",
        "load_offline_data",
        "OfflineToOnlineReplayBuffer",
        "RayBufferClient",
    } >= set(rbdata.__all__)
