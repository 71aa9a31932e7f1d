"""A real PostgreSQL for the queue's tests: one server per test session (per xdist
worker), started from the package index's `pgserver` wheel (PostgreSQL 16 binaries; as
root it runs the server as its own `pgserver` user), and one fresh database per test.
The server is stopped and its directory deleted when the session ends."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object]:
    import pgserver

    # not under pytest's tmp dirs: those are 0700 root's, which the server's user cannot enter
    server = pgserver.get_server(tempfile.mkdtemp(prefix="podctl-pg-"), cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def pg_url(pg_server) -> Iterator[str]:
    """postgresql://... of an empty database of its own."""
    import psycopg

    name = f"podctl_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_server.get_uri(name)
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def role_url(pg_url: str, role: str, group: str) -> str:
    """PG_URL as the login role ROLE (made if missing, the server's roles are shared by its
    databases), a member of GROUP (podctl_user, podctl_ticker or podctl_admin). The
    server trusts its local logins, so no password. The queue's schema must exist (its
    first migration makes the group roles)."""
    from urllib.parse import quote

    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"""DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
              CREATE ROLE "{role}" LOGIN;
            END IF; END $$""")
        conn.execute(f'GRANT {group} TO "{role}"')
    prefix = "postgresql://postgres:@"
    assert pg_url.startswith(prefix), pg_url
    return f"postgresql://{quote(role, safe='')}:@" + pg_url[len(prefix):]
