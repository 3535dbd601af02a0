"""`exchange`: statements sent with libpq's own calls (psycopg's `pq` layer), each prepared
once per connection and then sent as Bind and Execute, in pipeline mode with a Sync after each,
so every one is its own transaction whatever else travels with it; `give_back` returns the
connection to its pool, reading first, in a task of its own, what a cancelled exchange is owed.

The decision not to undo: not a cursor. psycopg's cursor and pipeline machinery costs several
times this path's client CPU a statement, which bounds a worker at capacity and delays an idle
one's pass after a notification. Only the plain case is taken here; `exchange` says which, and
what becomes of a connection that breaks.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import itertools
import re
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import timedelta
from functools import cache
from typing import Any, Final, cast

import psycopg
from psycopg import abc, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.rows import TupleRow

from durability.postgres import traffic
from durability.storekit.chores import Chores

__all__ = [
    "AGAIN", "CAN_PIPELINE", "SETTLE", "Outcome", "exchange", "give_back", "hold", "settled",
]

#: Whether this libpq can pipeline (14+); without it every statement goes through a cursor.
CAN_PIPELINE: Final = pq.version() >= 140000 and hasattr(pq.PGconn, "enter_pipeline_mode")


class _Again:
    """The outcome of a statement to send again through a cursor (see the module doc)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "AGAIN"


AGAIN: Final = _Again()
#: What became of one statement: its first row (None: no row), AGAIN, or the connection's
#: break, if it broke before the statement answered.
Outcome = tuple[Any, ...] | None | _Again | psycopg.OperationalError

_Status = pq.ExecStatus
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%")
_Key = tuple[bytes, tuple[int, ...]]

#: Per connection, the statements prepared on it: (text, parameter types) -> name.
_PREPARED: weakref.WeakKeyDictionary[Any, dict[_Key, bytes]] = weakref.WeakKeyDictionary()
_NAMES = itertools.count()


@cache
def _compiled(sql: str) -> tuple[bytes, tuple[str, ...]] | None:
    """`sql` with `$1, $2, ...` for its `%(name)s` placeholders, or None if it holds any other
    `%` (which psycopg would read as an escape or a positional placeholder)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            raise ValueError(sql)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    try:
        text = _PLACEHOLDER.sub(number, sql)
    except ValueError:
        return None
    return text.encode(), tuple(names)


async def exchange(
    conn: Any,
    statements: Sequence[tuple[str, object]],
    together: Collection[int] = (),
    heard: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    """Send `statements` ((sql, params) each) down `conn`, an autocommit connection nobody
    else is using, in one pipeline; what became of each, in order.

    `together` names (by index, in the order to send them) statements to send last, as ONE
    transaction (BEGIN, them, COMMIT): they commit at once or not at all, so each gets its row
    only once the COMMIT has answered, and if any of them fails they all come back AGAIN (the
    transaction rolled back; sent alone, each says why). The transaction waits at most
    `GROUP_LOCK_WAIT` for any lock, so one member stuck behind another transaction's lock
    holds the others back no longer than that: they all fail, and go alone. Fewer than two:
    nothing is wrapped.

    Values are still dumped and rows loaded by psycopg's own adapters (a `Transformer` of the
    connection), so every type converts exactly as through a cursor.

    `heard(index, outcome)`, if given, hears each statement's final outcome as soon as it
    is known, rather than when the whole pipeline is read: a statement outside the group the
    moment its answer arrives, a member of the group once its COMMIT has. So a take sent
    with a turn's synchronously committed writes is not held back by their WAL flush. It is
    not called for an outcome that is still to change (a member read before its COMMIT), nor
    for the statements left unanswered when the connection breaks (the list says what became
    of those).

    A connection whose `prepare_threshold` is None (psycopg's switch for poolers such as
    PgBouncer in transaction mode, which cannot keep a session's prepared statements) gets each
    statement parsed every time instead.

    Only the plain case is taken here; anything else is left to the cursor, which knows every
    rule: a statement whose text holds a `%` other than `%(name)s` placeholders, parameters that
    are not a mapping or that fail to dump (text that is not valid Unicode: dumped before anything
    of the statement is written, so it is never on the wire to take another's answer), a libpq
    without pipeline mode (before 14), and any statement that failed (sent again through a cursor,
    it raises its own error; it rolled back, so that is a retry of a transaction that did not
    happen). A connection that breaks is reported as broken for every statement that had not
    answered (whether those committed is unknown, as ever), and closed. One whose exchange is
    cancelled while answers are still owed is left as it is, and `give_back` reads them before
    the pool has it again; anything else that interrupts it closes it.
    """
    if not CAN_PIPELINE:
        return [AGAIN] * len(statements)
    pgconn: pq.abc.PGconn = conn.pgconn
    run = _Exchange(conn, statements, together)
    try:
        pgconn.enter_pipeline_mode()
        run.write()
        while pgconn.flush():
            await _ready(pgconn.socket, write=True)
        run.count()
        await run.read(heard)
        pgconn.exit_pipeline_mode()
    except psycopg.OperationalError:
        run.broke()
    except asyncio.CancelledError:
        # Cancelled (a stopping worker, a call past its bound): closing the connection here
        # would cost a new one, and the pool warns of every closed connection it is handed
        # back. The statements were sent, so their answers come; `give_back` reads them.
        _OWING[conn] = functools.partial(_settle, pgconn, run.writer, run.sent[run.answered :])
        raise
    except BaseException:
        pgconn.finish()
        _PREPARED.pop(conn, None)
        raise
    return run.outcomes


class _Exchange:
    """One `exchange` under way: what was sent, what each statement came to, and how far the
    answers have been read (so a break or a cancel knows what is still owed)."""

    __slots__ = (
        "answered", "committed", "conn", "group", "grouped", "members", "outcomes", "rest",
        "sent", "statements", "writer",
    )

    def __init__(
        self, conn: Any, statements: Sequence[tuple[str, object]], together: Collection[int]
    ) -> None:
        self.conn = conn
        self.statements = statements
        self.writer = _Writer(conn)
        self.outcomes: list[Outcome] = [AGAIN] * len(statements)
        group = list(dict.fromkeys(together))  # in the order given
        self.group = group if len(group) >= 2 else []
        self.grouped = set(self.group)
        self.rest = [index for index in range(len(statements)) if index not in self.grouped]
        # What was sent, in order: a statement's index and the key it prepared under (None:
        # prepared before), or a marker (_BEGIN, _BOUND, _COMMIT) around the group.
        self.sent: list[tuple[int, _Key | None]] = []
        self.members: list[int] = []  # the group's statements actually sent
        self.answered = 0
        self.committed = False

    def write(self) -> None:
        """Write every statement (those outside the group first, then the group inside its
        BEGIN and COMMIT) into libpq's buffer."""
        writer, statements, sent = self.writer, self.statements, self.sent
        for index in self.rest:
            writer.send(*statements[index], index, sent)
        if self.group:
            writer.mark(b"BEGIN", _BEGIN, sent)
            writer.mark(_BOUND_LOCK_WAIT, _BOUND, sent)
            for index in self.group:
                if writer.send(*statements[index], index, sent):
                    self.members.append(index)
            writer.mark(b"COMMIT", _COMMIT, sent)

    def count(self) -> None:
        """Count what was sent, one round trip, into the connection's traffic if it has one."""
        counting = traffic.of(self.conn)
        if counting is not None and self.sent:
            counting.requests(_sent_names(self.statements, self.sent))
            counting.round_trip()

    async def read(self, heard: Callable[[int, Outcome], None] | None) -> None:
        """Read every answer, in the order sent, telling `heard` each final outcome."""
        writer, outcomes, members = self.writer, self.outcomes, self.members
        pgconn = writer.pgconn
        begun = False
        for index, fresh_key in self.sent:
            results = await _until_sync(pgconn)
            self.answered += 1
            if index == _BEGIN:
                begun = _status_is(results, b"BEGIN")
            elif index == _BOUND:
                begun = begun and _status_is(results, b"SET")
            elif index == _COMMIT:
                self.committed = begun and _status_is(results, b"COMMIT")
                if not self.committed or any(outcomes[i] is AGAIN for i in members):
                    for member in members:  # rolled back, all of them: each goes alone
                        outcomes[member] = AGAIN
                if heard is not None:
                    for member in members:
                        heard(member, outcomes[member])
            else:
                outcome = _outcome(results, fresh_key, writer.prepared, writer.transformer)
                outcomes[index] = outcome
                if heard is not None and index not in self.grouped:
                    heard(index, outcome)

    def broke(self) -> None:
        """The connection broke: close it, and every statement that had not answered is
        broken too (whether those committed is unknown, as ever)."""
        self.writer.pgconn.finish()  # owes answers it will never give
        _PREPARED.pop(self.conn, None)
        broken = psycopg.OperationalError("the connection broke before the statement answered")
        for index, _ in self.sent[self.answered :]:
            if index >= 0:
                self.outcomes[index] = broken
        if not self.committed:  # answered, but whether their transaction committed is unknown
            for member in self.members:
                self.outcomes[member] = broken


#: The longest a connection whose exchange was cancelled may take to read the answers it is
#: owed (in a task of its own, `give_back`'s) before it is closed rather than handed back.
SETTLE: Final = timedelta(seconds=5)
#: Connections a cancelled exchange left owing answers, each with what reads them.
_OWING: weakref.WeakKeyDictionary[Any, Callable[[], Awaitable[None]]] = (
    weakref.WeakKeyDictionary()
)
#: Per pool, the tasks reading them, held until done and ended when its store closes (`settled`).
_SETTLING: weakref.WeakKeyDictionary[Any, Chores] = weakref.WeakKeyDictionary()


async def give_back(pool: Any, conn: Any) -> None:
    """Return `conn`, taken from `pool` with `getconn`, to it: at once, or, if an `exchange`
    on it was cancelled while answers were owed, once a task of its own has read them, so the
    connection goes back whole and the caller waits for nothing. If they do not all come within
    `SETTLE` (a server that stopped answering), or the connection breaks meanwhile, it is closed
    and handed back so, and the pool makes another."""
    settle = _OWING.pop(conn, None)
    if settle is None:
        await pool.putconn(conn)
        return
    hold(pool, asyncio.get_running_loop().create_task(_settled(pool, conn, settle)))


def hold(pool: Any, task: asyncio.Future[Any]) -> None:
    """Keep `task`, a store's work on `pool` that outlives the call that began it (a
    connection settling, a `result` waiter's row being deleted), until `settled(pool)` ends
    it with the rest."""
    settling = _SETTLING.get(pool)
    if settling is None:
        settling = _SETTLING[pool] = Chores()
    settling.hold(task)


async def settled(pool: Any, within: timedelta = SETTLE) -> None:
    """Wait, at most `within`, for the connections of `pool` still reading what a cancelled
    `exchange` was owed (`give_back`'s tasks) and the other tasks `hold` keeps; then cancel
    those left (a settling connection is closed and handed back), and wait for them too. A
    store calls it as it closes, before its pool: no task of the store outlives it, to be
    destroyed pending with the loop."""
    settling = _SETTLING.get(pool)
    if settling is not None:
        await settling.ended(within)


async def _settled(pool: Any, conn: Any, settle: Callable[[], Awaitable[None]]) -> None:
    try:
        async with asyncio.timeout(SETTLE.total_seconds()):
            await settle()
    except BaseException as error:
        conn.pgconn.finish()
        _PREPARED.pop(conn, None)
        await pool.putconn(conn)
        if not isinstance(error, Exception):  # the loop is ending: let the cancel through
            raise
        return
    await pool.putconn(conn)


async def _settle(
    pgconn: pq.abc.PGconn, writer: _Writer, owed: list[tuple[int, _Key | None]]
) -> None:
    """Read the answers a cancelled `exchange` was owed, up to its last Sync, and leave
    pipeline mode: the connection is then as a finished exchange leaves it. The prepared
    statements keep their bookkeeping, except the first owed one's, whose answer may have
    been read in part when the cancel came: it is forgotten, and prepared again when next
    used (under a new name, so the one the server may hold is never confused with it)."""
    while pgconn.flush():
        await _ready(pgconn.socket, write=True)
    for position, (index, fresh_key) in enumerate(owed):
        results = await _until_sync(pgconn)
        if position == 0:
            if fresh_key is not None:
                writer.prepared.pop(fresh_key, None)
        elif index >= 0:
            _outcome(results, fresh_key, writer.prepared, writer.transformer)
    pgconn.exit_pipeline_mode()


def _unflushed_sync() -> Callable[[pq.abc.PGconn], None] | None:
    """libpq's `PQsendPipelineSync` (17+), which marks a Sync without writing to the socket,
    from the libpq this process loaded for psycopg; None where it cannot be found.

    psycopg's `pipeline_sync` is `PQpipelineSync`, which also flushes: one `send` and one
    wakeup of the server per statement. With this, a pipeline is written once, when `exchange`
    flushes it, and each statement is still its own transaction."""
    if pq.version() < 170000 or pq.__impl__ == "python":
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "/libpq" in line}
    except OSError:
        return None
    if len(paths) != 1:
        return None  # none, or two libpqs: which one holds psycopg's connections is unsure
    try:
        function = ctypes.CDLL(paths.pop()).PQsendPipelineSync
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p]
    function.restype = ctypes.c_int

    def sync(pgconn: pq.abc.PGconn) -> None:
        # `pgconn_ptr` is the PGconn's address, which psycopg's C and binary layers expose.
        if function(cast(Any, pgconn).pgconn_ptr) != 1:
            raise psycopg.OperationalError(
                f"could not queue a pipeline sync: {pgconn.get_error_message()}"
            )

    return sync


_UNFLUSHED_SYNC: Final = _unflushed_sync()


def _sync(pgconn: pq.abc.PGconn) -> None:
    """A Sync after the statement just written, left in libpq's buffer where it can be."""
    if _UNFLUSHED_SYNC is not None:
        _UNFLUSHED_SYNC(pgconn)
    else:
        pgconn.pipeline_sync()


class _Writer:
    """Writes statements onto one connection in pipeline mode, each followed by a Sync."""

    __slots__ = ("pgconn", "prepared", "preparing", "transformer")

    def __init__(self, conn: Any) -> None:
        self.pgconn: pq.abc.PGconn = conn.pgconn
        self.transformer: abc.Transformer = Transformer(conn)
        self.prepared = _PREPARED.setdefault(conn, {})
        self.preparing = getattr(conn, "prepare_threshold", 5) is not None

    def mark(self, command: bytes, marker: int, sent: list[tuple[int, _Key | None]]) -> None:
        """Write a bare command of the group's own (BEGIN, its lock bound, COMMIT) and note it
        in `sent` under its marker."""
        self.pgconn.send_query_params(command, None)
        _sync(self.pgconn)
        sent.append((marker, None))

    def send(
        self, sql: str, params: object, index: int, sent: list[tuple[int, _Key | None]]
    ) -> bool:
        """Write one statement and note it in `sent`; False if it is left to a cursor."""
        compiled = _compiled(sql)
        if compiled is None or not isinstance(params, Mapping):
            return False
        text, names = compiled
        transformer = self.transformer
        try:
            values = transformer.dump_sequence(
                [params[name] for name in names], [PyFormat.AUTO] * len(names)
            )
        except Exception:
            # Nothing of it is written yet: alone, through a cursor, it raises for its caller
            # only, and the statements around it keep their own answers.
            return False
        key = (text, tuple(transformer.types or ()))
        pgconn = self.pgconn
        if not self.preparing:  # the connection says not to (a pooler that cannot keep them)
            pgconn.send_query_params(
                text, values, param_types=key[1], param_formats=transformer.formats
            )
            _sync(pgconn)
            sent.append((index, None))
            return True
        name = self.prepared.get(key)
        fresh = name is None
        if name is None:
            # Counted as prepared at once, so a second statement like it in this pipeline
            # binds it too (the Parse is ahead of it on the wire); forgotten if it failed.
            name = self.prepared[key] = f"durability_{next(_NAMES)}".encode()
            pgconn.send_prepare(name, text, param_types=key[1])
        pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
        _sync(pgconn)
        sent.append((index, key if fresh else None))
        return True


def _sent_names(
    statements: Sequence[tuple[str, object]], sent: list[tuple[int, _Key | None]]
) -> list[str]:
    """What `exchange` sent, named for counting (the group's own commands by their keyword)."""
    marks = {_BEGIN: "BEGIN", _BOUND: "SET", _COMMIT: "COMMIT"}
    return [
        marks[index] if index < 0 else traffic.name(statements[index][0]) for index, _ in sent
    ]


#: Markers in `exchange`'s list of what was sent.
_BEGIN: Final = -1
_BOUND: Final = -2
_COMMIT: Final = -3

#: The longest a `together` transaction waits for a lock (see `exchange`).
GROUP_LOCK_WAIT: Final = "50ms"
_BOUND_LOCK_WAIT: Final = f"SET LOCAL lock_timeout = '{GROUP_LOCK_WAIT}'".encode()


def _status_is(results: list[pq.abc.PGresult], tag: bytes) -> bool:
    """Whether one of the group's own commands answered with `tag` (a failed transaction's
    COMMIT answers ROLLBACK, and no error)."""
    return bool(results) and results[-1].status == _Status.COMMAND_OK and (
        results[-1].command_status == tag
    )


def _outcome(
    results: list[pq.abc.PGresult],
    fresh_key: _Key | None,
    prepared: dict[_Key, bytes],
    transformer: abc.Transformer,
) -> Outcome:
    """One statement's outcome from its results (its Parse's first, if it sent one)."""
    if fresh_key is not None:
        if not results or results[0].status != _Status.COMMAND_OK:
            prepared.pop(fresh_key, None)
            return AGAIN
        results = results[1:]
    result = results[-1] if results else None
    if result is None or result.status not in (_Status.TUPLES_OK, _Status.COMMAND_OK):
        if result is not None and result.error_field(pq.DiagnosticField.SQLSTATE) == b"26000":
            prepared.clear()  # the session lost its prepared statements (DEALLOCATE ALL)
        return AGAIN
    if result.status == _Status.TUPLES_OK and result.ntuples:
        transformer.set_pgresult(result)
        row: TupleRow = transformer.load_row(0, tuple)
        return row
    return None


async def _until_sync(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """The results of one statement (and its Parse, if any), up to the Sync after it."""
    results: list[pq.abc.PGresult] = []
    while True:
        if pgconn.is_busy():
            await _ready(pgconn.socket, write=False)
            pgconn.consume_input()
            continue
        result = pgconn.get_result()
        if result is None:  # the end of one command's results
            continue
        if result.status == _Status.PIPELINE_SYNC:
            return results
        results.append(result)


async def _ready(fileno: int, *, write: bool) -> None:
    """Wait until the socket can be read (or written)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if write:
        loop.add_writer(fileno, wake)
    else:
        loop.add_reader(fileno, wake)
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(fileno)
        else:
            loop.remove_reader(fileno)
