"""TCPLS from Python: a secure transport with many streams over one or several TCP
connections (paths), TLS 1.3 underneath.

Blocking API (this module)::

    import tcpls
    with tcpls.connect("127.0.0.1:4444", ca="tcpls-cert/cert.pem", server_name="localhost") as session:
        stream = session.open_stream()
        stream.write(b"hello")
        stream.finish()
        print(stream.read())          # b"hello" from `tcpls serve --mode echo`

asyncio API: :mod:`tcpls.aio` (``async with await tcpls.aio.connect(...)``). Errors raise
subclasses of :class:`tcpls.Error` (:mod:`tcpls.errors`).
"""

from typing import Iterable, List, NamedTuple, Optional, Sequence, Union
import os

from . import _native
from .errors import *  # noqa: F401,F403 (the exception classes are part of this module's API)
from .errors import __all__ as _error_names

PathLike = Union[str, "os.PathLike[str]"]

#: The most bytes one read or write call moves (larger writes are split).
MAX_IO_LEN: int = _native.MAX_IO_LEN


class Event(NamedTuple):
    """A session event: ``kind`` is "stream_opened", "path_up", "path_down", "failover",
    "migration", "all_paths_lost" or "session_closed" (the last one)."""

    kind: str
    conn: int
    stream: int
    detail: str


class Stream:
    """A bidirectional stream. One thread may read while another writes."""

    def __init__(self, native: "_native.Stream") -> None:
        self._native = native

    @property
    def id(self) -> int:
        """The stream's ID in its session."""
        return self._native.id

    def write(self, data: Union[bytes, bytearray, memoryview], timeout: Optional[float] = None) -> None:
        """Writes all of ``data``, waiting at most ``timeout`` seconds for room (None: no limit)."""
        self._native.write(bytes(data) if not isinstance(data, bytes) else data, timeout)

    def read(self, n: int = -1, timeout: Optional[float] = None) -> bytes:
        """Up to ``n`` bytes as soon as some arrived; ``b""`` at the end of the stream. ``n=-1``
        reads until the end. Waits at most ``timeout`` seconds (None: no limit)."""
        return self._native.read(n, timeout)

    def readexactly(self, n: int, timeout: Optional[float] = None) -> bytes:
        """Exactly ``n`` bytes; :class:`SessionEndedError` if the stream ends first."""
        parts = []
        left = n
        while left > 0:
            chunk = self._native.read(min(left, MAX_IO_LEN), timeout)
            if not chunk:
                raise SessionEndedError(f"the stream ended after {n - left} of {n} bytes")  # noqa: F405
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def steer(self, conn: Optional[int]) -> None:
        """Sends this stream's data on path ``conn`` from now on (None: the scheduler decides);
        :meth:`Session.migrate` moves steered streams."""
        self._native.steer(conn)

    def finish(self) -> None:
        """Sends FIN after what was written (reading goes on); writing afterwards raises
        :class:`ClosedError`."""
        self._native.finish()

    def reset(self, code: int = 0) -> None:
        """Aborts the sending side; the peer's reads raise :class:`StreamResetError`."""
        self._native.reset(code)

    def close(self) -> None:
        """Closes both sides (FIN if not finished); later calls raise :class:`ClosedError`."""
        self._native.close()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """A TCPLS session: open and accept streams, add paths, read events and statistics.
    Use it with ``with`` to close it at the end."""

    def __init__(self, native: "_native.Session") -> None:
        self._native = native

    def open_stream(self) -> Stream:
        """Opens a stream (the peer sees it with its first byte)."""
        return Stream(self._native.open_stream())

    def accept_stream(self, timeout: Optional[float] = None) -> Stream:
        """The next stream the peer opened; :class:`SessionEndedError` when there will be none."""
        return Stream(self._native.accept_stream(timeout))

    def add_path(self, path: str, timeout: Optional[float] = 10.0) -> int:
        """Adds a TCP connection "[LOCAL@]HOST:PORT" (LOCAL a local address or dev:NAME) to
        the session; returns its connection ID."""
        return self._native.add_path(path, timeout)

    def next_event(self, timeout: Optional[float] = None) -> Event:
        """The next :class:`Event`; :class:`TimeoutError` if none came in time,
        :class:`SessionEndedError` after "session_closed"."""
        return Event(*self._native.next_event(timeout))

    def connections(self) -> List[dict]:
        """Each TCP connection (path): id, usable, local, remote, bytes_sent, bytes_received,
        rtt_us, rttvar_us, cwnd, total_retrans, delivery_rate."""
        return self._native.connections()

    def abandon_path(self, conn: int) -> None:
        """Drops path ``conn`` at once, as if it had failed (its data goes on the others)."""
        self._native.abandon_path(conn)

    def migrate(self, from_conn: int, to_conn: int) -> None:
        """Moves the streams steered to path ``from_conn`` to ``to_conn`` and closes ``from_conn``."""
        self._native.migrate(from_conn, to_conn)

    def set_round_robin(self, round_robin: bool = True) -> None:
        """Spreads data over every path in turn (True) or by lowest RTT (False, the default)."""
        self._native.set_round_robin(round_robin)

    @property
    def is_fallback(self) -> bool:
        """The server speaks plain TLS only: one stream, one path."""
        return self._native.is_fallback

    @property
    def closed(self) -> bool:
        return self._native.closed

    def close(self) -> None:
        """Closes gracefully: what was written is delivered, then the session ends (waits for
        the peer, 10 s at most). Raises :class:`SessionEndedError` if the session failed."""
        self._native.close()

    def abort(self) -> None:
        """Ends the session at once, dropping what is not sent yet."""
        self._native.abort()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._native.closed:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()


class Listener:
    """A server: accepts sessions on one or more addresses."""

    def __init__(self, native: "_native.Listener") -> None:
        self._native = native

    @property
    def addresses(self) -> List[str]:
        """The addresses listened on ("IP:PORT", ports resolved)."""
        return self._native.addresses

    def add_address(self, addr: str) -> str:
        """Listens on one more address for the same sessions; returns it with its port."""
        return self._native.add_address(addr)

    def accept(self, timeout: Optional[float] = None) -> Session:
        """The next established session."""
        return Session(self._native.accept(timeout))

    def close(self) -> None:
        """Stops listening; accepted sessions go on."""
        self._native.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
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
    """Connects to ``addr`` ("HOST:PORT") and completes the TLS handshake.

    ``ca``: the CA (or the server's certificate) to trust, else the system's roots;
    ``insecure``: accept any certificate (tests only); ``server_name``: the name the server's
    certificate must have (default: HOST); ``cert``/``key``: a client certificate;
    ``paths``: more TCP connections to add ("[LOCAL@]HOST:PORT" each).
    """
    native = _native.connect(
        addr,
        ca=_path(ca),
        insecure=insecure,
        server_name=server_name,
        cert=_path(cert),
        key=_path(key),
        timeout=timeout,
    )
    session = Session(native)
    try:
        for path in paths:
            session.add_path(path, timeout)
    except BaseException:
        session.abort()
        raise
    return session


def listen(addr: str, cert: PathLike, key: PathLike, *, also: Iterable[str] = ()) -> Listener:
    """Listens on ``addr`` ("IP:PORT", port 0 for any) with the certificate ``cert`` and its
    key ``key`` (PEM files); ``also``: more addresses for the same sessions."""
    listener = Listener(_native.listen(addr, os.fspath(cert), os.fspath(key)))
    for other in also:
        listener.add_address(other)
    return listener


def _path(p: Optional[PathLike]) -> Optional[str]:
    return None if p is None else os.fspath(p)


__all__ = ["connect", "listen", "Session", "Stream", "Listener", "Event", "MAX_IO_LEN", *_error_names]
