"""Byte codecs of the compressed storage: zstandard when installed, else the standard zlib."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

Buffer = Any  # any object with the buffer protocol (bytes, a numpy array, a memoryview)


class _Codec:
    """A compress/decompress pair over bytes, with its name and level.

    Args:
        name: ``"zstd"`` or ``"zlib"``.
        level: the compression level (checked against the codec's range).
    """

    def __init__(self, name: str, level: int) -> None:
        if not isinstance(level, int) or isinstance(level, bool):
            raise TypeError(f"compression_level must be an int, got {level!r}.")
        self.name = name
        self.level = level
        self.compress: Callable[[Buffer], bytes]
        self.decompress: Callable[[Buffer], bytes]
        if name == "zstd":
            import zstandard

            low, high = -(1 << 17), zstandard.MAX_COMPRESSION_LEVEL
            _check_level(level, low, high, name)
            self.compress = zstandard.ZstdCompressor(level=level).compress
            self.decompress = zstandard.ZstdDecompressor().decompress
        else:
            _check_level(level, -1, 9, name)
            self.compress = lambda data: zlib.compress(data, level)
            self.decompress = zlib.decompress


def _check_level(level: int, low: int, high: int, name: str) -> None:
    if not low <= level <= high:
        raise ValueError(f"compression_level must lie in [{low}, {high}] for {name}, got {level}.")


def _default_codec(level: int) -> _Codec:
    """The zstd codec at ``level`` with zstandard installed (``compression`` extra), else zlib."""
    try:
        import zstandard  # noqa: F401 - only whether it is there
    except ImportError:
        return _Codec("zlib", level)
    return _Codec("zstd", level)
