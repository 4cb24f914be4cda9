"""TCPLS with asyncio::

    import tcpls.aio
    async with await tcpls.aio.connect("127.0.0.1:4444", ca="cert.pem", server_name="localhost") as session:
        stream = await session.open_stream()
        await stream.write(b"hello")
        await stream.finish()
        print(await stream.read())

Reads, writes, accepts and events never block the event loop: they use the library's
non-blocking calls and wait, when those cannot make progress, for the session's readiness
descriptor with ``loop.add_reader``. The handshake, adding a path and closing run in the
loop's default executor.
"""

import asyncio
import functools
from typing import Iterable, List, Optional, Sequence, Set, Union

from . import _native
from . import Event, PathLike, _path
from .errors import SessionEndedError, WouldBlockError

#: Reads without a size (``read()``) go by chunks of this size.
_CHUNK = 1 << 20


class Session:
    """A TCPLS session for asyncio; ``async with`` closes it at the end."""

    def __init__(self, native: "_native.Session") -> None:
        self._native = native
        self._fd = native.fd()
        self._waiters: Set["asyncio.Future[None]"] = set()
        self._watching: Optional[asyncio.AbstractEventLoop] = None

    async def _readiness(self) -> None:
        """Waits until the readiness descriptor says a non-blocking call may now progress."""
        loop = asyncio.get_running_loop()
        if self._watching is not loop:
            self._stop_watching()  # a session moved to another event loop
            loop.add_reader(self._fd, self._ready)
            self._watching = loop
        waiter = loop.create_future()
        self._waiters.add(waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)

    def _ready(self) -> None:
        # Cleared before the waiters try again, so that a readiness during their calls is not
        # lost. The descriptor stays watched while the session is open: it is signalled only
        # after a call found nothing to do, so an idle session costs no wake-ups.
        self._native.clear_fd()
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def open_stream(self) -> "Stream":
        """Opens a stream."""
        return Stream(self._native.open_stream(), self)

    async def accept_stream(self) -> "Stream":
        """The next stream the peer opened; :class:`SessionEndedError` when there will be none."""
        while True:
            try:
                return Stream(self._native.accept_stream(0.0), self)
            except WouldBlockError:
                await self._readiness()

    async def next_event(self) -> Event:
        """The next :class:`tcpls.Event`; :class:`SessionEndedError` after "session_closed"."""
        while True:
            try:
                return Event(*self._native.next_event(0.0))
            except WouldBlockError:
                await self._readiness()

    async def add_path(self, path: str, timeout: Optional[float] = 10.0) -> int:
        """Adds a TCP connection "[LOCAL@]HOST:PORT"; returns its connection ID."""
        return await _in_executor(self._native.add_path, path, timeout)

    def connections(self) -> List[dict]:
        """Each TCP connection (path) with its statistics (see :meth:`tcpls.Session.connections`)."""
        return self._native.connections()

    def abandon_path(self, conn: int) -> None:
        self._native.abandon_path(conn)

    def migrate(self, from_conn: int, to_conn: int) -> None:
        """Moves the streams steered to path ``from_conn`` to ``to_conn`` and closes ``from_conn``."""
        self._native.migrate(from_conn, to_conn)

    def set_round_robin(self, round_robin: bool = True) -> None:
        self._native.set_round_robin(round_robin)

    @property
    def is_fallback(self) -> bool:
        return self._native.is_fallback

    @property
    def closed(self) -> bool:
        return self._native.closed

    async def close(self) -> None:
        """Closes gracefully (waits for the peer, 10 s at most)."""
        self._stop_watching()
        await _in_executor(self._native.close)

    def abort(self) -> None:
        self._stop_watching()
        self._native.abort()

    def _stop_watching(self) -> None:
        if self._watching is not None:
            if not self._watching.is_closed():
                self._watching.remove_reader(self._fd)
            self._watching = None

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if self._native.closed:
            self._stop_watching()
        elif exc_type is None:
            await self.close()
        else:
            self.abort()


class Stream:
    """A stream for asyncio, with reader and writer methods like asyncio's streams."""

    def __init__(self, native: "_native.Stream", session: Session) -> None:
        self._native = native
        self._session = session

    @property
    def id(self) -> int:
        return self._native.id

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes as soon as some arrived (``b""`` at the end); ``n=-1``: to the end."""
        if n >= 0:
            return await self._read_some(n)
        parts = []
        while True:
            chunk = await self._read_some(_CHUNK)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    async def _read_some(self, n: int) -> bytes:
        while True:
            data = self._native.try_read(n)
            if data is not None:
                return data
            await self._session._readiness()

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; :class:`SessionEndedError` if the stream ends first."""
        parts = []
        left = n
        while left > 0:
            chunk = await self._read_some(left)
            if not chunk:
                raise SessionEndedError(f"the stream ended after {n - left} of {n} bytes")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    async def write(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Writes all of ``data``, waiting (without blocking the loop) for room."""
        data = bytes(data)
        offset = 0
        while offset < len(data):
            # Slices of at most _CHUNK: a partial write copies little of the rest.
            chunk = data if offset == 0 and len(data) <= _CHUNK else data[offset : offset + _CHUNK]
            n = self._native.try_write(chunk)
            if n is None:
                await self._session._readiness()
                continue
            offset += n

    async def drain(self) -> None:
        """For asyncio's writer interface: written bytes are already queued in the session."""

    async def finish(self) -> None:
        """Sends FIN after what was written (asyncio's ``write_eof``)."""
        self._native.finish()

    write_eof = finish

    def steer(self, conn: Optional[int]) -> None:
        """Sends this stream's data on path ``conn`` from now on (None: the scheduler decides)."""
        self._native.steer(conn)

    def reset(self, code: int = 0) -> None:
        self._native.reset(code)

    def close(self) -> None:
        self._native.close()


async def _in_executor(fn, *args):  # type: ignore[no-untyped-def]
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))


async def connect(
    addr: str,
    ca: Optional[PathLike] = None,
    insecure: bool = False,
    server_name: Optional[str] = None,
    *,
    cert: Optional[PathLike] = None,
    key: Optional[PathLike] = None,
    paths: Sequence[str] = (),
    timeout: Optional[float] = 10.0,
) -> Session:
    """As :func:`tcpls.connect`, for asyncio: ``async with await tcpls.aio.connect(...) as s``."""
    native = await _in_executor(
        functools.partial(
            _native.connect,
            addr,
            ca=_path(ca),
            insecure=insecure,
            server_name=server_name,
            cert=_path(cert),
            key=_path(key),
            timeout=timeout,
        )
    )
    session = Session(native)
    try:
        for path in paths:
            await session.add_path(path, timeout)
    except BaseException:
        session.abort()
        raise
    return session


class Listener:
    """A server for asyncio."""

    def __init__(self, native: "_native.Listener") -> None:
        self._native = native

    @property
    def addresses(self) -> List[str]:
        return self._native.addresses

    async def add_address(self, addr: str) -> str:
        return await _in_executor(self._native.add_address, addr)

    async def accept(self, timeout: Optional[float] = None) -> Session:
        """The next established session."""
        return Session(await _in_executor(self._native.accept, timeout))

    def close(self) -> None:
        self._native.close()

    async def __aenter__(self) -> "Listener":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


async def listen(addr: str, cert: PathLike, key: PathLike, *, also: Iterable[str] = ()) -> Listener:
    """As :func:`tcpls.listen`, for asyncio."""
    listener = Listener(await _in_executor(_native.listen, addr, _path(cert), _path(key)))
    for other in also:
        await listener.add_address(other)
    return listener


__all__ = ["connect", "listen", "Session", "Stream", "Listener"]
