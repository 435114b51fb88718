"""torchrl's remote buffer names: RayReplayBuffer and RemoteTensorDictReplayBuffer.

rbdata hosts a buffer in Ray with ``service_backend="ray"``; these classes give
that buffer torchrl's names and constructor arguments, so a script importing
them switches by changing the import.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rbdata._component.checks import check_int
from rbdata.buffers.replay import ReplayBuffer
from rbdata.buffers.tensordict import TensorDictReplayBuffer

__all__ = ["RayReplayBuffer", "RemoteTensorDictReplayBuffer"]


class RemoteTensorDictReplayBuffer(TensorDictReplayBuffer):
    """torchrl's TensorDict buffer for remote calls: here a plain :class:`TensorDictReplayBuffer`.

    torchrl's class is a :class:`TensorDictReplayBuffer` whose methods ``torch.rpc``
    may call through a remote reference; called locally it is the plain buffer,
    and so it is here. rbdata does not serve ``torch.rpc``: to use a buffer from
    other processes, pass ``service_backend="ray"`` (or use :class:`RayReplayBuffer`)
    and hand out its ``client()``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, RemoteTensorDictReplayBuffer
        >>> rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(4)}, [4]))
        >>> rb.sample()["obs"].shape
        torch.Size([2])
    """


#: RayReplayBuffer over each hosted class (one subclass per class, built once)
_OVER: dict[type, type] = {}


class RayReplayBuffer(ReplayBuffer):
    """A buffer hosted in a Ray actor, extended and sampled from any process (torchrl's name).

    It is ``replay_buffer_cls(..., service_backend="ray")`` under torchrl's
    constructor: the object is an instance of both this class and
    ``replay_buffer_cls``, and forwards every call to the actor (see
    :doc:`/ray`); ``client()`` gives a picklable handle, ``shutdown()`` stops
    the actor (and Ray, if this buffer started it).

    Keyword Args:
        replay_buffer_cls: the buffer class hosted (default :class:`ReplayBuffer`;
            any rbdata buffer class, e.g. :class:`TensorDictReplayBuffer`).
        ray_init_config: keyword arguments for ``ray.init()`` when Ray is not running.
        remote_config: actor options (``num_cpus``, ``num_gpus``, ...).
        transport: ``"auto"``, ``"ray"`` or ``"distributed"`` (see ``ReplayBuffer``).
        transport_options: options of the ``"distributed"`` transport.
        delayed_init: build the components in the actor at first use (default False).
        **kwargs: the hosted class's arguments (storage, sampler, writer, batch_size, ...).

    Raises:
        TypeError: if ``replay_buffer_cls`` is not a :class:`ReplayBuffer` subclass.

    Example (it starts Ray; ``tests/buffers/test_remote.py`` runs it)::

        from rbdata import LazyTensorStorage, RayReplayBuffer

        rb = RayReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        rb.extend(torch.arange(8))
        assert rb.sample().shape == (4,)
        rb.shutdown()
    """

    #: the class of the buffer the actor hosts
    _hosted_cls: ClassVar[type] = ReplayBuffer
    _transport_kind: str = "ray"

    def __new__(
        cls,
        replay_buffer_cls: type = ReplayBuffer,
        *,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The Ray-backed buffer: an instance of this class and of ``replay_buffer_cls``.

        ``ReplayBuffer.__new__`` builds it through the Ray backend's factory; the
        buffer the actor hosts is a plain ``replay_buffer_cls`` (built here too, when
        the factory asks for it with ``service_backend=None``).
        """
        if "_service" in kwargs:  # the Ray backend builds its forwarding object
            return ReplayBuffer.__new__(cls, **kwargs)
        if "service_backend" in kwargs:  # the factory builds the hosted, direct buffer
            return cls._hosted_cls(**kwargs)
        if not (
            isinstance(replay_buffer_cls, type) and issubclass(replay_buffer_cls, ReplayBuffer)
        ):
            raise TypeError(
                f"replay_buffer_cls must be a ReplayBuffer subclass, got {replay_buffer_cls!r}."
            )
        over = cls._over_class(replay_buffer_cls)
        options: dict[str, Any] = {}
        if ray_init_config is not None:
            options["ray_init_config"] = ray_init_config
        if remote_config is not None:
            options["remote_config"] = remote_config
        kwargs.setdefault("delayed_init", False)
        buffer = ReplayBuffer.__new__(
            over, service_backend="ray", service_backend_options=options or None, **kwargs
        )
        buffer.transport_kind = "distributed" if kwargs.get("transport") == "distributed" else "ray"
        return buffer

    def __init__(
        self,
        replay_buffer_cls: type = ReplayBuffer,
        *,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Take torchrl's constructor arguments (see the class docstring).

        :meth:`__new__` hands them to the Ray backend, whose object is what
        this call returns; that object's own ``__init__`` takes them, so this
        one only declares the signature (``inspect.signature``, IDEs).
        """

    @classmethod
    def _over_class(cls, replay_buffer_cls: type) -> type:
        """This class over ``replay_buffer_cls`` (itself for a plain ReplayBuffer)."""
        if replay_buffer_cls is ReplayBuffer:
            return cls
        over = _OVER.get(replay_buffer_cls)
        if over is None:
            over = type(
                cls.__name__,
                (cls, replay_buffer_cls),
                {"__doc__": cls.__doc__, "_hosted_cls": replay_buffer_cls},
            )
            _OVER[replay_buffer_cls] = over
        return over

    @property
    def transport_kind(self) -> str:
        """The transport of the payloads: ``"ray"`` or ``"distributed"``.

        The constructor sets it from its ``transport`` argument.

        Raises:
            ValueError: when set to anything but ``"ray"`` or ``"distributed"``.
        """
        return self._transport_kind

    @transport_kind.setter
    def transport_kind(self, value: str) -> None:
        if value not in ("ray", "distributed"):
            raise ValueError(f'transport_kind must be "ray" or "distributed", got {value!r}.')
        self._transport_kind = value

    def clients(self, num_clients: int) -> list[Any]:
        """``num_clients`` picklable clients, one per concurrent consumer (torchrl's).

        Raises:
            TypeError: if ``num_clients`` is not an int.
            ValueError: if it is below 1.
        """
        count = check_int(num_clients, "num_clients", minimum=1)
        return [self.client() for _ in range(count)]
