"""Lightning integration: :class:`ReplayDataModule` and :class:`ReplayCallback`.

Needs the ``lightning`` extra (``pip install 'rbdata[lightning]'``).
"""

from rbdata.lightning.callback import ReplayCallback
from rbdata.lightning.datamodule import ReplayDataModule

__all__ = ["ReplayCallback", "ReplayDataModule"]
