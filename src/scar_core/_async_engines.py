"""One SQLAlchemy ``AsyncEngine`` per running event loop, shared by the pgvector sources.

An asyncio connection pool belongs to the loop that opened its connections, so each loop gets its
own engine. An engine given by the caller is used as it is, on every loop. SQLAlchemy is imported
only when an engine is first needed, so ``import scar_core`` stays numpy-only.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING

from scar_core.errors import InvalidSettingsError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["AsyncEnginePerLoop"]


class AsyncEnginePerLoop:
    """Hand out the running loop's ``AsyncEngine`` for a URL, or a caller's engine as it is.

    Args:
        connection: A database URL, or a SQLAlchemy ``AsyncEngine``.
        driver_hint: The error message when the URL's driver is not an async one.
        missing_hint: The error message when ``connection`` is empty; ``None`` to let SQLAlchemy
            report it.
    """

    def __init__(
        self, connection: object, *, driver_hint: str, missing_hint: str | None = None
    ) -> None:
        self._given: AsyncEngine | None = None
        self._url: object = connection
        if not isinstance(connection, str) and hasattr(connection, "sync_engine"):
            self._given = connection  # type: ignore[assignment]
        self._driver_hint = driver_hint
        self._missing_hint = missing_hint
        self._lock = threading.Lock()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncEngine] = (
            weakref.WeakKeyDictionary()
        )

    def current(self) -> AsyncEngine:
        """Return the engine of the running event loop, creating it on first use."""
        if self._given is not None:
            return self._given
        if self._missing_hint is not None and (not self._url or self._url == "None"):
            raise InvalidSettingsError(self._missing_hint)
        from sqlalchemy.exc import InvalidRequestError
        from sqlalchemy.ext.asyncio import create_async_engine

        loop = asyncio.get_running_loop()
        with self._lock:
            engine = self._by_loop.get(loop)
            if engine is None:
                try:
                    engine = create_async_engine(self._url)  # type: ignore[arg-type]
                except InvalidRequestError as error:
                    raise InvalidSettingsError(self._driver_hint) from error
                self._by_loop[loop] = engine
            return engine

    async def dispose_current(self) -> None:
        """Dispose of the running loop's engine (never of a caller's engine)."""
        if self._given is not None:
            return
        with self._lock:
            engine = self._by_loop.pop(asyncio.get_running_loop(), None)
        if engine is not None:
            await engine.dispose()
