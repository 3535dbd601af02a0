"""`Doorbell`: processes sharing a SQLite file wake each other's waiting readers.

SQLite has no NOTIFY, but processes sharing a file share a machine and a directory. Each
process that waits binds one Unix datagram socket in `<file>-doorbell/`; a commit that makes a
row visible (or visible sooner) sends the queue's name to every other socket there. Datagrams
rather than a FIFO or inotify: a send reaches one process without anyone holding it open, a
full buffer drops the ring instead of blocking the writer (that reader has rings pending
anyway), and the socket a killed process left behind refuses the send, which is how it is
found and removed. A ring can still be missed (a process binding as another commits), so
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


def directory_of(file: Path) -> Path:
    """Where the processes sharing `file` keep their doorbells."""
    return file.with_name(file.name + "-doorbell")


class Doorbell:
    """This process's doorbell for one SQLite file: `ring(queue, ready)` wakes the others'
    waiters, `on_ring(queue, ready)` is called (on the event loop) when another process rings.
    `ready`: a row is visible now; otherwise one only shows sooner than it did."""

    def __init__(self, file: Path, on_ring: Callable[[str, bool], None]) -> None:
        self.directory = directory_of(file.resolve())
        self._on_ring = on_ring
        self._socket: socket.socket | None = None
        self._name: str | None = None
        self._fd: int | None = None  # the directory, opened: reached by /proc if its path is long
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sender: socket.socket | None = None  # for a process that rings but never waits
        self._failed = not hasattr(socket, "AF_UNIX")

    @property
    def listening(self) -> bool:
        """Whether this process hears the others' rings (so its readers need not poll)."""
        return self._socket is not None

    def listen(self) -> bool:
        """Bind this process's socket, if not yet; whether it is listening. A failure (no Unix
        sockets, a directory that cannot be made) is logged once and leaves it polling."""
        if self._socket is not None or self._failed:
            return self._socket is not None
        try:
            self.directory.mkdir(exist_ok=True)
            name = f"{os.getpid()}-{secrets.token_hex(6)}"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                listener.setblocking(False)
                listener.bind(self._address(name))
                loop = asyncio.get_running_loop()
                loop.add_reader(listener.fileno(), self._heard)
            except BaseException:
                listener.close()
                raise
        except (OSError, RuntimeError) as error:
            self._failed = True
            self._close_directory()
            log.warning("no doorbell beside %s (%r); waiting readers poll", self.directory, error)
            return False
        self._socket, self._name, self._loop = listener, name, loop
        return True

    def ring(self, queue: str, ready: bool = True) -> None:
        """Tell every other process listening on this file to look at `queue` again. Never
        raises: a ring that cannot be sent is one the fallback look covers."""
        try:
            names = os.listdir(self.directory)
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
        for name in names:
            if name == self._name:
                continue
            try:
                sender.sendto(payload, self._address(name))
            except (ConnectionRefusedError, FileNotFoundError):
                self._remove(name)  # left by a process that is gone
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.ENOTSOCK):
                    log.debug("ringing %s failed: %r", name, error)

    def close(self) -> None:
        """Stop listening and take this process's socket out of the directory."""
        listener, self._socket = self._socket, None
        if listener is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(listener.fileno())
            listener.close()
            if self._name is not None:
                self._remove(self._name)
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()
        self._close_directory()

    # -- inside ------------------------------------------------------------------------

    def _heard(self) -> None:
        """Read every ring waiting on the socket; each queue named is woken once."""
        listener = self._socket
        if listener is None:
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

    def _address(self, name: str) -> str:
        path = os.path.join(self.directory, name)
        if len(os.fsencode(path)) <= _LONGEST:
            return path
        if self._fd is None:
            self._fd = os.open(self.directory, os.O_RDONLY)
        return f"/proc/self/fd/{self._fd}/{name}"  # Linux: a long directory reached by its fd

    def _remove(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.directory, name))

    def _close_directory(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
