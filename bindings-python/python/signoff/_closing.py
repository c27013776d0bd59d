"""The context-manager protocol of everything in signoff that is closed once: leaving a ``with``
or ``async with`` block calls ``close()``."""

from __future__ import annotations

from types import TracebackType
from typing import Optional, Type, TypeVar

_T = TypeVar("_T", bound="Closing")


class Closing:
    """``with x:`` / ``async with x:`` close ``x`` on the way out. Subclasses define ``close``."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    async def __aenter__(self: _T) -> _T:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()
