"""`Doorbell`: processes sharing a SQLite file wake each other's waiting readers.

SQLite has no NOTIFY, but processes sharing a file share a directory. Each process that waits
binds a Unix datagram socket in `<file>-doorbell/` (one that waits for endings, another in its
`ended/`, which only endings ring: they come every pass, and most processes wait for none); a
commit that makes a row visible (or sooner) sends the queue's name to every other socket there.
Datagrams, not a FIFO or inotify: a send needs no one holding it open, a full buffer drops the
ring rather than block the writer, and a killed process's socket refuses the send, which is how
it is found and removed. A ring can still be missed (a process binding as another commits), so
readers keep a slow look as the fallback; where Unix sockets are missing they poll as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

__all__ = ["Doorbell", "directory_of"]

log = logging.getLogger(__name__)

#: The longest path a Unix socket address holds everywhere (Linux allows 107 bytes, BSDs 103).
_LONGEST = 100
#: What one ring carries at most: a queue name, cut to fit (a ring only says "look").
_RING_BYTES = 512
#: A ring's first byte: a row is ready now, or one shows sooner than it did.
_READY, _SOONER = b"r", b"s"


#: The folder, within a file's doorbell folder, of the sockets that hear endings.
ENDED = "ended"


def directory_of(file: Path) -> Path:
    """Where the processes sharing `file` keep their doorbells."""
    return file.with_name(file.name + "-doorbell")


class Doorbell:
    """This process's doorbell for one SQLite file: `ring(queue, ready)` wakes the others'
    waiters, `on_ring(queue, ready)` is called (on the event loop) when another process rings.
    `ready`: a row is visible now; otherwise one only shows sooner than it did."""

    def __init__(self, file: Path, on_ring: Callable[[str, bool], None]) -> None:
        self.directory = directory_of(file.resolve())
        # As text, each ring lists one of them: a path joined per ring costs more than the list.
        self._folders = (str(self.directory), os.path.join(self.directory, ENDED))
        self._on_ring = on_ring
        self._socket: socket.socket | None = None
        self._name: str | None = None
        self._watcher: socket.socket | None = None  # hears the endings (`listen(ended=True)`)
        self._watcher_name: str | None = None
        self._fd: int | None = None  # the directory, opened: reached by /proc if its path is long
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sender: socket.socket | None = None  # for a process that rings but never waits
        self._failed = not hasattr(socket, "AF_UNIX")

    @property
    def listening(self) -> bool:
        """Whether this process hears the others' rings (so its readers need not poll)."""
        return self._socket is not None

    @property
    def watching(self) -> bool:
        """Whether this process hears the others' endings (`listen(ended=True)`)."""
        return self._watcher is not None

    def listen(self, *, ended: bool = False) -> bool:
        """Bind this process's socket (with `ended`, the one that hears endings), if not yet;
        whether it is listening. A failure (no Unix sockets, a directory that cannot be made)
        is logged once and leaves it polling."""
        bound = self._watcher if ended else self._socket
        if bound is not None or self._failed:
            return bound is not None
        try:
            folder = self.directory / ENDED if ended else self.directory
            folder.mkdir(parents=True, exist_ok=True)
            name = f"{os.getpid()}-{secrets.token_hex(6)}"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                listener.setblocking(False)
                listener.bind(self._address(name, ended))
                loop = asyncio.get_running_loop()
                loop.add_reader(listener.fileno(), self._heard, listener)
            except BaseException:
                listener.close()
                raise
        except (OSError, RuntimeError) as error:
            self._failed = True
            self._close_directory()
            log.warning("no doorbell beside %s (%r); waiting readers poll", self.directory, error)
            return False
        if ended:
            self._watcher, self._watcher_name = listener, name
        else:
            self._socket, self._name = listener, name
        self._loop = loop
        return True

    def ring(self, queue: str, ready: bool = True, *, ended: bool = False) -> None:
        """Tell every other process listening on this file to look at `queue` again (with
        `ended`, every process that hears endings: `queue` names an ending). Never raises: a
        ring that cannot be sent is one the fallback look covers."""
        try:
            # No one waiting for an ending (the usual case) leaves no `ended/`: one failed open.
            names = os.listdir(self._folders[ended])
        except OSError:
            return  # nobody has listened yet
        sender = self._socket or self._sender
        if sender is None:
            try:
                sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            except (OSError, AttributeError):
                return
            sender.setblocking(False)
        payload = (_READY if ready else _SOONER) + queue.encode("utf-8", "replace")[:_RING_BYTES]
        own = self._watcher_name if ended else self._name
        for name in names:
            if name == own or (not ended and name == ENDED):
                continue
            try:
                sender.sendto(payload, self._address(name, ended))
            except (ConnectionRefusedError, FileNotFoundError):
                self._remove(name, ended)  # left by a process that is gone
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.ENOTSOCK):
                    log.debug("ringing %s failed: %r", name, error)

    def close(self) -> None:
        """Stop listening and take this process's socket out of the directory."""
        listener, self._socket = self._socket, None
        self._unbind(listener, self._name, False)
        watcher, self._watcher = self._watcher, None
        self._unbind(watcher, self._watcher_name, True)
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()
        self._close_directory()

    # -- inside ------------------------------------------------------------------------

    def _unbind(self, listener: socket.socket | None, name: str | None, ended: bool) -> None:
        """Stop reading `listener` (bound as `name`), close it and take it out of the folder."""
        if listener is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(listener.fileno())
        listener.close()
        if name is not None:
            self._remove(name, ended)

    def _heard(self, listener: socket.socket) -> None:
        """Read every ring waiting on `listener`; each queue named is woken once."""
        if listener is not self._socket and listener is not self._watcher:
            return
        queues: dict[str, bool] = {}
        while True:
            try:
                payload = listener.recv(_RING_BYTES + 1)
            except OSError:  # nothing more to read (BlockingIOError), or the socket went
                break
            queue = payload[1:].decode("utf-8", "replace")
            queues[queue] = queues.get(queue, False) or payload[:1] == _READY
        for queue, ready in queues.items():
            self._on_ring(queue, ready)

    def _address(self, name: str, ended: bool = False) -> str:
        within = os.path.join(ENDED, name) if ended else name
        path = os.path.join(self.directory, within)
        if len(os.fsencode(path)) <= _LONGEST:
            return path
        if self._fd is None:
            self._fd = os.open(self.directory, os.O_RDONLY)
        return f"/proc/self/fd/{self._fd}/{within}"  # Linux: a long directory reached by its fd

    def _remove(self, name: str, ended: bool = False) -> None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.directory, ENDED, name) if ended
                      else os.path.join(self.directory, name))

    def _close_directory(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
