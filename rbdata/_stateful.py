"""The one state protocol every rbdata component follows."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """Something whose state can be saved and restored.

    ``state_dict()`` returns plain Python containers and tensors only (never
    arbitrary objects), so that it can be saved with ``torch.save`` and loaded
    with ``torch.load(weights_only=True)``. ``load_state_dict`` must tolerate
    keys it does not know (fields added by later versions) and keys that are
    missing (fields that did not exist yet), keeping its defaults for those.
    """

    def state_dict(self) -> dict[str, Any]:
        """Return the component's state."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the component's state from :meth:`state_dict`'s output."""
