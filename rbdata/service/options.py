"""The keys ``service_backend_options`` accepts for ``service_backend="ray"``.

Declared once: :mod:`rbdata.service` registers the Ray backend with them, so
a buffer refuses an unknown key before anything starts, and
:func:`~rbdata.service.attach.attach_ray_service` refuses one when called on
its own. What each option does: :mod:`rbdata.service.attach`.

Examples:
    >>> from rbdata.buffers.backends import backend_option_keys
    >>> from rbdata.service.options import OPTION_KEYS
    >>> backend_option_keys("ray") == OPTION_KEYS
    True
"""

from __future__ import annotations

__all__ = ["OPTION_KEYS"]

#: The keys ``service_backend_options`` accepts.
OPTION_KEYS = frozenset(
    {
        "ray_init_config",
        "remote_config",
        "recovery",
        "same_node_maps",
        "coalesce",
        "rate_limiter",
        "rate_limiter_timeout",
        "shards",
    }
)
