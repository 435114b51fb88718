"""Write the intersphinx inventories of the projects the docs link to (docs/_inventories/*.inv).

The docs build runs offline (no network but a package index), so intersphinx cannot fetch
the projects' own ``objects.inv``. These small inventories list the names rbdata's pages
and docstrings use, with their pages on each project's site; ``conf.py`` maps each project
to its site and to the file here. Add a name below and run this script to link it:

    python docs/_inventories/make_inventories.py
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# project -> (version, {name: (role, page relative to the site's root)})
# ``$`` at the end of a page stands for the name (Sphinx's inventory shorthand).
INVENTORIES: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "torch": (
        "stable",
        {
            "torch": ("py:module", "torch.html#module-$"),
            "torch.Tensor": ("py:class", "tensors.html#$"),
            "torch.Generator": ("py:class", "generated/$.html"),
            "torch.device": ("py:class", "tensor_attributes.html#$"),
            "torch.dtype": ("py:class", "tensor_attributes.html#$"),
            "torch.save": ("py:function", "generated/$.html"),
            "torch.load": ("py:function", "generated/$.html"),
            "torch.cat": ("py:function", "generated/$.html"),
            "torch.empty": ("py:function", "generated/$.html"),
            "torch.randint": ("py:function", "generated/$.html"),
            "torch.index_select": ("py:function", "generated/$.html"),
            "torch.compile": ("py:function", "generated/$.html"),
            "torch.nn.Module": ("py:class", "generated/$.html"),
            "torch.multiprocessing": ("py:module", "multiprocessing.html#module-$"),
            "torch.distributed": ("py:module", "distributed.html#module-$"),
            "torch.utils.data": ("py:module", "data.html#module-$"),
            "torch.utils.data.DataLoader": ("py:class", "data.html#$"),
            "torch.utils.data.Dataset": ("py:class", "data.html#$"),
            "torch.utils.data.IterableDataset": ("py:class", "data.html#$"),
            # where autodoc finds them (type hints name the defining module)
            "torch.utils.data.dataset.IterableDataset": (
                "py:class",
                "data.html#torch.utils.data.IterableDataset",
            ),
            "torch.utils.data.dataloader.DataLoader": (
                "py:class",
                "data.html#torch.utils.data.DataLoader",
            ),
            "torch.utils.data.get_worker_info": ("py:function", "data.html#$"),
            "torch.utils.data.default_collate": ("py:function", "data.html#$"),
            "torch.utils.data.default_convert": ("py:function", "data.html#$"),
        },
    ),
    "tensordict": (
        "stable",
        {
            "tensordict": ("py:module", "reference/tensordict.html#module-$"),
            "tensordict.TensorDict": ("py:class", "reference/generated/$.html"),
            "tensordict.TensorDictBase": ("py:class", "reference/generated/$.html"),
            "tensordict.LazyStackedTensorDict": ("py:class", "reference/generated/$.html"),
            "tensordict.MemoryMappedTensor": ("py:class", "reference/generated/$.html"),
            # where autodoc finds them (type hints name the defining module)
            "tensordict.base.TensorDictBase": (
                "py:class",
                "reference/generated/tensordict.TensorDictBase.html",
            ),
            "tensordict._td.TensorDict": (
                "py:class",
                "reference/generated/tensordict.TensorDict.html",
            ),
            "tensordict.TensorDict.memmap": (
                "py:method",
                "reference/generated/tensordict.TensorDict.html#$",
            ),
            "tensordict.TensorDict.load_memmap": (
                "py:method",
                "reference/generated/tensordict.TensorDict.html#$",
            ),
        },
    ),
    "lightning": (
        "stable",
        {
            "lightning.pytorch.Trainer": (
                "py:class",
                "api/lightning.pytorch.trainer.trainer.Trainer.html",
            ),
            "lightning.pytorch.Trainer.fit": (
                "py:method",
                "api/lightning.pytorch.trainer.trainer.Trainer.html"
                "#lightning.pytorch.trainer.trainer.Trainer.fit",
            ),
            "lightning.pytorch.LightningModule": (
                "py:class",
                "api/lightning.pytorch.core.LightningModule.html",
            ),
            "lightning.pytorch.LightningDataModule": (
                "py:class",
                "api/lightning.pytorch.core.LightningDataModule.html",
            ),
            "lightning.pytorch.Callback": (
                "py:class",
                "api/lightning.pytorch.callbacks.Callback.html",
            ),
            "lightning.pytorch.cli.LightningCLI": (
                "py:class",
                "api/lightning.pytorch.cli.LightningCLI.html",
            ),
            "lightning.pytorch.callbacks.ModelCheckpoint": (
                "py:class",
                "api/lightning.pytorch.callbacks.ModelCheckpoint.html",
            ),
            "lightning.pytorch.loggers.CSVLogger": (
                "py:class",
                "api/lightning.pytorch.loggers.csv_logs.html#lightning.pytorch.loggers.csv_logs.CSVLogger",
            ),
        },
    ),
    "torchdata": (
        "main",
        {
            "torchdata.stateful_dataloader": ("py:module", "torchdata.stateful_dataloader.html"),
            "torchdata.stateful_dataloader.StatefulDataLoader": (
                "py:class",
                "torchdata.stateful_dataloader.html#$",
            ),
            "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader": (
                "py:class",
                "torchdata.stateful_dataloader.html#torchdata.stateful_dataloader.StatefulDataLoader",
            ),
            "torchdata.stateful_dataloader.Stateful": (
                "py:class",
                "torchdata.stateful_dataloader.html#$",
            ),
        },
    ),
    "ray": (
        "latest",
        {
            "ray.init": ("py:function", "ray-core/api/doc/$.html"),
            "ray.remote": ("py:function", "ray-core/api/doc/$.html"),
            "ray.get": ("py:function", "ray-core/api/doc/$.html"),
            "ray.shutdown": ("py:function", "ray-core/api/doc/$.html"),
            "ray.actor.ActorHandle": ("py:class", "ray-core/api/doc/$.html"),
        },
    ),
}


def write(project: str, version: str, names: dict[str, tuple[str, str]]) -> Path:
    """Write ``<project>.inv`` in Sphinx's inventory format, version 2."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    lines = [f"{name} {role} 1 {page} -\n" for name, (role, page) in sorted(names.items())]
    path = HERE / f"{project}.inv"
    path.write_bytes(header.encode() + zlib.compress("".join(lines).encode()))
    return path


if __name__ == "__main__":
    for project, (version, names) in INVENTORIES.items():
        print(write(project, version, names))
