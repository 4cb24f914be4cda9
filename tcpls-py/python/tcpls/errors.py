"""The exceptions of tcpls: every failure raises a subclass of :class:`Error`, with the
library's message (what failed and what to do, as the ``tcpls`` command line says it)."""

import builtins


class Error(Exception):
    """Base class of every tcpls error."""


class InvalidArgumentError(Error, ValueError):
    """An argument is malformed or out of range (an address, a length, a timeout)."""


class ClosedError(Error):
    """The object (or the side of the stream used) was closed by the application."""


class BusyError(Error):
    """Another thread is using the object where only one may: one reader and one writer per
    stream, one thread accepting or waiting for events per session."""


class TimeoutError(Error, builtins.TimeoutError):
    """Nothing happened within the timeout."""


class WouldBlockError(Error, BlockingIOError):
    """A non-blocking call could not make progress now."""


class TlsError(Error):
    """The TLS handshake failed: a certificate the client does not trust, an alert, not TLS."""


class ConnectError(Error, ConnectionError):
    """The TCP connection could not be made."""


class TransportError(Error, OSError):
    """Another I/O error of the session."""


class StreamResetError(Error, ConnectionResetError):
    """The peer reset the stream."""


class SessionEndedError(Error):
    """The session is over: closed by the peer, failed, or out of connections."""


class ConfigError(Error):
    """A certificate, key or CA file is missing or malformed."""


class InternalError(Error):
    """A bug in the library (please report it with the message)."""


__all__ = [
    "Error",
    "InvalidArgumentError",
    "ClosedError",
    "BusyError",
    "TimeoutError",
    "WouldBlockError",
    "TlsError",
    "ConnectError",
    "TransportError",
    "StreamResetError",
    "SessionEndedError",
    "ConfigError",
    "InternalError",
]
