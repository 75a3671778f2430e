"""What storage says when it cannot write, as one typed error (docs/errors.md, `storage_unavailable`):
every SqlPort passes its storage's errors through `storage_unavailable`, and nothing else is
mistaken for it."""

from __future__ import annotations

import errno
import sqlite3
from types import SimpleNamespace

import pytest

from archetype.commands.errors import StorageUnavailableError, storage_unavailable
from durable_world.port import DurableObjectSqlPort


def sqlite_error(message: str, name: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorname = name  # what sqlite3 sets (Python 3.11+)
    return error


@pytest.mark.parametrize("error", [
    sqlite_error("database or disk is full", "SQLITE_FULL"),
    sqlite_error("disk I/O error", "SQLITE_IOERR_WRITE"),
    sqlite3.OperationalError("database or disk is full"),  # an older sqlite3: the message alone
    Exception("Error: database or disk is full: SQLITE_FULL"),  # a Durable Object over its storage (workerd)
    OSError(errno.ENOSPC, "plus de place"),  # by its errno, whatever the message's language
    OSError(errno.EDQUOT, "quota"),
    OSError(errno.EIO, "E/S"),
], ids=["sqlite-full", "sqlite-ioerr", "message-only", "durable-object", "enospc", "edquot", "eio"])  # fmt: skip
def test_a_full_or_failing_storage_is_storage_unavailable(error):
    refusal = storage_unavailable(error)
    assert isinstance(refusal, StorageUnavailableError)
    assert (refusal.code, refusal.http_status, refusal.retry_after_s) == ("storage_unavailable", 503, 5)


@pytest.mark.parametrize("error", [
    sqlite_error("database is locked", "SQLITE_BUSY"),
    sqlite3.IntegrityError("UNIQUE constraint failed: commands.sequence"),
    Exception("string or blob too big: SQLITE_TOOBIG"),  # what a chunk over the row limit meets: not the disk
    OSError(errno.ENOENT, "No such file or directory"),
    ValueError("a bug"),
], ids=["busy", "constraint", "too-big", "enoent", "bug"])  # fmt: skip
def test_anything_else_stays_what_it_is(error):
    assert storage_unavailable(error) is None


def test_the_durable_object_port_raises_it_for_a_statement_and_for_a_commit():
    full = Exception("Error: database or disk is full: SQLITE_FULL")

    def refuse(*args):
        raise full

    port = DurableObjectSqlPort(SimpleNamespace(sql=SimpleNamespace(exec=refuse), transactionSync=refuse))
    with pytest.raises(StorageUnavailableError) as statement:
        port.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(StorageUnavailableError):
        port.transaction(lambda: None)
    assert statement.value.__cause__ is full
