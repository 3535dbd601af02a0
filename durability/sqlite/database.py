"""`SqliteDatabase`: the one object that owns a SQLite file's connections for a process.

Every store over one file shares one: a *writer* connection that runs every write transaction
and a *reader* for plain reads, each on its own thread, over a file in WAL mode, so a read never
queues behind a write waiting for the file's lock.

The one decision not to undo: a write transaction is one Python function handed to the
writer's thread whole (`BEGIN IMMEDIATE`, its statements, `COMMIT`), not a statement per hop.
`SqliteDatabase` says why, and what a lock, a removed file and the clock do to a call.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Literal, TypeVar, cast

import aiosqlite

from durability.checks import positive
from durability.signals import NotMigrated
from durability.sqlite.batching import GroupCommit, Writer, busy, transaction
from durability.sqlite.counting import Counted
from durability.sqlite.doorbell import Doorbell
from durability.sqlite.wal import WalCheckpoints
from durability.storekit.outage import Unanswered
from durability.storekit.traffic import Traffic

__all__ = [
    "Gone",
    "Locked",
    "SqliteDatabase",
    "busy",
    "Synchronous",
    "from_us",
    "now_us",
    "on_its_thread",
    "open_database",
    "queries",
    "transaction",
]

T = TypeVar("T")

#: `PRAGMA synchronous` for the connections. In WAL mode `NORMAL` survives a crash of any
#: process (a commit is in the WAL before `COMMIT` returns) but may lose the last commits on a
#: power loss or OS crash; `FULL` syncs the WAL on every commit and loses nothing.
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_us() -> int:
    """The host clock in whole microseconds since the epoch: the unit of every stored time."""
    return time.time_ns() // 1000


def from_us(micros: int) -> datetime:
    """A stored time back as a timezone-aware UTC datetime (exact: no float on the way)."""
    return _EPOCH + timedelta(microseconds=micros)


def to_us(moment: datetime) -> int:
    """A datetime as stored microseconds since the epoch."""
    if moment.tzinfo is None:
        raise ValueError(f"a naive datetime is ambiguous here; give it a timezone: {moment!r}")
    return (moment - _EPOCH) // timedelta(microseconds=1)


_NAME = re.compile(r"^--\s*name:\s*(\S+)\s*$", re.MULTILINE)
#: `-- include: <file> <name>`: that statement's text here (a part defined earlier in the same
#: file, or any statement of another file), so statements that share a part say it once.
_INCLUDE = re.compile(r"^--\s*include:\s*(\S+)\.sql\s+(\w+)\s*$")


@cache
def queries(name: str) -> dict[str, str]:
    """The statements of `<name>.sql` beside this module, keyed by their `-- name:` line, each
    `-- include:` line replaced by the part it names."""
    text = files(__package__ or "durability.sqlite").joinpath(f"{name}.sql").read_text("utf-8")
    parts = _NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]; comments are for readers, not SQLite
    named: dict[str, str] = {}
    for statement, body in zip(parts[1::2], parts[2::2], strict=True):
        if statement in named:
            raise ValueError(f"{name}.sql: statement {statement!r} is defined twice")
        lines = []
        for line in body.splitlines():
            included = _INCLUDE.match(line)
            if included:
                source, part = included.groups()
                lines.append((named if source == name else queries(source))[part])
            elif not line.lstrip().startswith("--"):
                lines.append(line)
        named[statement] = "\n".join(lines).strip()
    return named


def _not_migrated(error: sqlite3.OperationalError) -> bool:
    # Only our own tables: an effect naming a missing table of the user's is the user's error.
    return str(error).startswith(("no such table: durability_", "no such table: main.durability_"))


class Locked(sqlite3.OperationalError, Unanswered):
    """The file stayed locked by another connection past the busy timeout (see above)."""


class Gone(sqlite3.OperationalError, Unanswered):
    """The file was removed or replaced since it was opened, or SQLite cannot reach it."""


def _translated(
    error: BaseException, path: Path | None = None, busy_timeout: timedelta | None = None
) -> BaseException:
    """The error a caller should see for `error`: `NotMigrated` for a missing table of ours,
    `Locked` for a file another connection kept locked."""
    if not isinstance(error, sqlite3.OperationalError) or isinstance(error, Unanswered):
        return error
    translated: BaseException | None = None
    if _not_migrated(error):
        translated = NotMigrated(
            f"{error}: run `await durability.sqlite.migrate(database)` once before using the"
            " SQLite stores"
        )
    elif "unable to open" in str(error) or "disk I/O error" in str(error):
        translated = Gone(f"the SQLite file {str(path)!r} cannot be reached: {error}")
    elif busy(error):
        waited = "" if busy_timeout is None else f" of {busy_timeout.total_seconds():g} s"
        translated = Locked(
            f"the SQLite file {str(path)!r} stayed locked by another connection past the busy"
            f" timeout{waited}: {error}"
        )
    if translated is None:
        return error
    translated.__cause__ = error
    return translated


class Signal(asyncio.Event):
    """Set when a queue's rows change for its waiters; `ready` if a row is visible now (a
    waiter takes at once), not if one only shows sooner than before (it looks first)."""

    ready = False


class SqliteDatabase:
    """One SQLite file as this process sees it: a writer and a reader connection.

    Build it with `await open_database(path)`; `close()` it when done. Share one per process
    among every checkpointer and scheduler over the file.

    A write transaction is one Python function handed to the writer's thread whole:
    `BEGIN IMMEDIATE`, its statements, `COMMIT`. Three reasons it is shaped that way:

    - `BEGIN IMMEDIATE` takes the file's write lock up front, waiting up to `busy_timeout` for
      another process to finish. A deferred transaction would read first and could then fail to
      upgrade (`SQLITE_BUSY` with no wait) when another process wrote in between.
    - One thread hop per transaction instead of one per statement: the hop, not the statements, is
      most of a pass's cost.
    - A cancelled caller cannot leave the connection inside an open transaction: the function runs
      to `COMMIT` or `ROLLBACK` on the thread whatever happens to the awaiting task.

    Writes that wait for the thread at the same time go in one transaction, each behind a savepoint
    (`batching.GroupCommit`): a busy worker pays one hop, one lock and one commit for a dozen
    passes' writes, and one that raises is still rolled back alone.

    Since the one writer thread runs transactions one after another, a process never fights itself
    for the write lock and needs no lock of its own. aiosqlite has no public "run this function on
    the connection's thread", so `_run` uses its queue through `on_its_thread` (aiosqlite's
    `Connection._execute`, present since the first releases), the only place that touches
    aiosqlite's internals.

    A lock another process holds past `busy_timeout` (`call_timeout_ms` through `open_durable`:
    the bound of a call on this store, since SQLite waits for nothing else) fails the call with
    `Locked`: an `Unanswered`, and still the `sqlite3.OperationalError` it was, so code that tells
    a busy file by that error goes on doing so.

    A file removed (or replaced) after it was opened would take writes without a word: SQLite
    writes on through its open descriptors to a file no one can open again, and all of it is lost
    at close. So every hop to a thread first checks that the path still names the file it opened
    (one `stat`), and fails with `Gone` if not, as it does for SQLite's own "unable to open" and
    I/O errors: an `Unanswered`, and a `sqlite3.OperationalError`, with nothing read or written.

    Times are the host's clock (`now_us`), read inside the transaction after the lock is taken, so
    the order of timestamps follows the order of commits across processes on one machine. The
    writer also knows it as the SQL function `durability_now_us()`, for a write that is one
    statement (`alone`): there SQLite takes the lock before the statement reads the clock.

    `signal(queue)` / `notify(queue)` wake a `next_ready` waiting the moment a `make_ready`
    commits: in this process directly, in the others on the file through the `doorbell`.
    """

    def __init__(
        self,
        path: str | Path,
        writer: aiosqlite.Connection,
        writer_raw: sqlite3.Connection,
        reader: aiosqlite.Connection,
        reader_raw: sqlite3.Connection,
        busy_timeout: timedelta,
        *,
        doorbell: bool = True,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        # Which file the path named when it was opened (see the module doc); absolute, so a
        # change of working directory does not change it.
        self._absolute = os.path.abspath(path)
        opened = os.stat(self._absolute)
        self._identity = (opened.st_dev, opened.st_ino)
        self._writer = writer
        self._writer_raw = writer_raw
        self._reader = reader
        self._reader_raw = reader_raw
        self._signals: dict[str, Signal] = {}
        # Other processes on the file ring it when they make work ready (`doorbell`).
        self._doorbell = (
            Doorbell(self.path, self._rung)
            if doorbell and not str(path).startswith("file:")
            else None
        )
        self._closed = False
        #: What this process sent the file (`durability.storekit.traffic`): every statement by its
        #: leading keyword, counted on its connection's thread, and every hop to a thread.
        self.traffic = Traffic()
        for raw in (writer_raw, reader_raw):
            if isinstance(raw, Counted):
                raw.sent = self.traffic.counter()
        #: The WAL's checkpoints, which the writer's commits no longer run (`wal`).
        self.wal = WalCheckpoints(self._absolute, synchronous)
        self._commits = GroupCommit(
            writer_raw, functools.partial(self._run, writer), self._translated, self.wal.committed
        )

    # -- running SQL -------------------------------------------------------------------

    def _translated(self, error: BaseException) -> BaseException:
        return _translated(error, self.path, self.busy_timeout)

    async def _run(self, connection: aiosqlite.Connection, work: Callable[[], T]) -> T:
        # The connection's own queue: `work` runs on its thread, after anything queued earlier.
        execute: Callable[[Callable[[], T]], Awaitable[T]] = on_its_thread(connection)
        self.traffic.round_trip()
        try:
            return await execute(functools.partial(self._there_then, work))
        except sqlite3.OperationalError as error:
            translated = self._translated(error)
            if translated is error:
                raise
            raise translated from error

    def _there_then(self, work: Callable[[], T]) -> T:
        """On a connection's thread: `work()`, once the path still names the file opened."""
        try:
            found = os.stat(self._absolute)
        except OSError as error:
            raise Gone(
                f"the SQLite file {str(self.path)!r} was removed after it was opened: nothing"
                " more is read from it or written to it"
            ) from error
        if (found.st_dev, found.st_ino) != self._identity:
            raise Gone(
                f"the SQLite file {str(self.path)!r} was removed and another put in its place"
                " after it was opened: nothing more is read from it or written to it"
            )
        return work()

    async def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work(connection)` as one write transaction; its result, or its exception after
        a rollback. `work` runs on the writer's thread, so it must not touch the event loop.
        Writes asked for while the thread is busy share one transaction, each behind a
        savepoint of its own (`batching.GroupCommit`): one that raises is rolled back alone."""
        return await self._commits.write(work)

    async def alone(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work(connection)`, which must run ONE write statement and read all its rows, as
        the statement's own transaction: SQLite takes the write lock for it up front (waiting
        `busy_timeout`) just as `BEGIN IMMEDIATE` would, and commits when it completes. Two
        statements fewer than `write`; only for a statement that reads no clock, since a time
        bound before the lock is taken would be stale by however long the lock took. Asked
        for while other writes wait, it joins their transaction (`write`)."""
        return await self._commits.write(work, alone=True)

    async def writer(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work(connection)` on the writer's thread with no transaction around it: for a
        function that reads first and opens a write transaction only if it needs one."""
        raw = self._writer_raw
        try:
            return await self._run(self._writer, lambda: work(raw))
        finally:
            self.wal.committed()

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work(connection)` on the reader's thread (autocommit: each statement sees the
        latest commit; open a transaction inside `work` to read several as one snapshot)."""
        raw = self._reader_raw
        return await self._run(self._reader, lambda: work(raw))

    async def trace(self, callback: Callable[[str], object] | None) -> None:
        """Call `callback(sql)` for every statement either connection runs, its parameters
        spelled out (None stops it): for tests counting statements, and for debugging.
        `traffic` counts regardless, and without it (`counting`)."""
        for connection, raw in ((self._writer, self._writer_raw), (self._reader, self._reader_raw)):
            await self._run(connection, functools.partial(raw.set_trace_callback, callback))

    # -- in-process wakeups ------------------------------------------------------------

    def signal(self, queue: str, *, ended: bool = False) -> Signal:
        """The signal the next `notify(queue)` sets, here or (through the doorbell) in another
        process on the file (`ended`: `queue` names an ending, which only the processes that
        asked for one hear). Take it *before* looking at the queue, so a `make_ready` that
        commits between the look and the wait still wakes the waiter."""
        if self._doorbell is not None:
            self._doorbell.listen(ended=ended)
        signal = self._signals.get(queue)
        if signal is None:
            signal = self._signals[queue] = Signal()
        return signal

    @property
    def hears_others(self) -> bool:
        """Whether another process's `notify` reaches this one's waiters (the doorbell is up),
        so a waiter needs no more than a slow look in case a ring went missing."""
        return self._doorbell is not None and self._doorbell.listening

    @property
    def hears_endings(self) -> bool:
        """Whether another process's `notify(..., ended=True)` reaches this one's waiters."""
        return self._doorbell is not None and self._doorbell.watching

    def notify(self, queue: str, *, ready: bool = True, ended: bool = False) -> None:
        """Wake every waiter of `queue`, in this process and in the others on the file, after
        a commit made a row visible (`ready`) or made one show sooner than it would have
        (not `ready`: a deadline moved earlier, which the waiters must look at again). With
        `ended`, `queue` names an ending: only the processes that wait for one are rung."""
        self._rung(queue, ready)
        if self._doorbell is not None:
            self._doorbell.ring(queue, ready, ended=ended)

    def _rung(self, queue: str, ready: bool) -> None:
        signal = self._signals.pop(queue, None)
        if signal is not None:
            signal.ready = signal.ready or ready
            signal.set()

    # -- lifetime ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connections after the work already queued on them (idempotent): the
        writes under way end first (each bounded by the busy timeout; at most
        `storekit.chores.ENDING` in all, then cancelled), so no task of the store is left."""
        if self._closed:
            return
        self._closed = True
        if self._doorbell is not None:
            self._doorbell.close()
        await self._commits.drained()
        await self.wal.close()
        await self._reader.close()
        await self._writer.close()

    async def __aenter__(self) -> SqliteDatabase:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SqliteDatabase({str(self.path)!r})"


def _patiently(step: Callable[[], T], attempts: int = 12) -> T:
    """Run `step`, trying again on a lock conflict the busy handler did not wait out (SQLite
    skips it where waiting could deadlock), with a jittered backoff of about 3 s in all."""
    delay = 0.005
    for _ in range(attempts - 1):
        try:
            return step()
        except sqlite3.OperationalError as error:
            if not busy(error):
                raise
        time.sleep(delay * random.uniform(0.5, 1.5))  # on the connection's thread, not the loop
        delay = min(delay * 2, 0.5)
    return step()


def on_its_thread(connection: aiosqlite.Connection) -> Callable[[Callable[[], T]], Awaitable[T]]:
    """What runs a function on `connection`'s own thread, after anything queued there before.

    aiosqlite keeps this as the private `Connection._execute` and offers nothing public that
    takes a function; this is the one place the library reaches it, so an aiosqlite that drops
    it fails here, by name, rather than somewhere a transaction runs."""
    execute = getattr(connection, "_execute", None)
    if execute is None:
        raise RuntimeError(f"aiosqlite {aiosqlite.__version__} has no Connection._execute")
    return cast("Callable[[Callable[[], T]], Awaitable[T]]", execute)


async def _connect(
    path: str, busy_timeout: timedelta, synchronous: Synchronous, *, query_only: bool
) -> tuple[aiosqlite.Connection, sqlite3.Connection]:
    made: list[sqlite3.Connection] = []

    def connector() -> sqlite3.Connection:
        raw: sqlite3.Connection
        if query_only:
            # `timeout` installs the busy handler at open, before any statement can meet
            # another process's lock (a read in WAL mode meets one only in rare moments).
            raw = sqlite3.connect(
                path, timeout=busy_timeout.total_seconds(), isolation_level=None,
                factory=Counted,
            )
        else:
            # No busy handler: the writer waits for a lock itself, in finer steps than
            # SQLite's (`batching.when_free`); `migrate` tries its WAL switch again itself.
            raw = sqlite3.connect(path, timeout=0, isolation_level=None, factory=Writer)
            raw.patience = busy_timeout.total_seconds()
        try:
            # These read the schema, which another process may be busy creating.
            _patiently(lambda: raw.execute(f"PRAGMA synchronous = {synchronous}"))
            if query_only:
                _patiently(lambda: raw.execute("PRAGMA query_only = 1"))
            else:
                # The host clock as SQL, read while the statement runs, after SQLite took its
                # lock: lets a one-statement write that needs the time skip `BEGIN IMMEDIATE`.
                raw.create_function("durability_now_us", 0, now_us)
                # Checkpoints run beside the commits, not inside one (`wal`).
                raw.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            raw.close()
            raise
        made.append(raw)
        return raw

    connection = aiosqlite.Connection(connector, iter_chunk_size=64)
    await connection
    return connection, made[0]


async def open_database(
    path: str | Path,
    *,
    busy_timeout: timedelta = timedelta(seconds=5),
    synchronous: Synchronous = "NORMAL",
    doorbell: bool = True,
) -> SqliteDatabase:
    """Open (creating if need be) the SQLite file at `path` for the stores of this process.

    `busy_timeout` is how long a statement waits for another process's lock before failing
    with `database is locked`. `synchronous` trades power-loss durability for commit speed
    (see `Synchronous`). `doorbell` lets the processes on the file wake each other's waiting
    readers (`durability.sqlite.doorbell`); without it they poll. Call `migrate(database)`
    before the first store operation.
    """
    positive("busy_timeout", busy_timeout)
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
    name = str(path)
    if name == ":memory:" or name == "" or name.startswith("file::memory:"):
        # Each connection would get a database of its own, and WAL needs a file.
        raise ValueError("the SQLite stores need a file path, not an in-memory database")
    writer, writer_raw = await _connect(name, busy_timeout, synchronous, query_only=False)
    try:
        reader, reader_raw = await _connect(name, busy_timeout, synchronous, query_only=True)
    except BaseException:
        await writer.close()
        raise
    database = SqliteDatabase(
        path, writer, writer_raw, reader, reader_raw, busy_timeout, doorbell=doorbell,
        synchronous=synchronous,
    )
    return database
