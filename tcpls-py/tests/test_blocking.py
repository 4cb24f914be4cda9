"""The blocking API against a Python server: echo, many streams, two paths with failover,
TLS fallback, and the errors a user meets."""

import socket
import ssl
import threading
import time

import pytest

import tcpls
from conftest import pattern


def test_echo(echo_server, certs):
    data = pattern(3 << 20, 1)
    with tcpls.connect(echo_server[0], ca=certs[0], server_name="localhost") as session:
        assert not session.is_fallback
        stream = session.open_stream()
        writer = threading.Thread(target=lambda: (stream.write(data), stream.finish()))
        writer.start()
        assert stream.read() == data
        writer.join()
        stats = session.connections()
        assert len(stats) == 1 and stats[0]["bytes_sent"] > len(data) and stats[0]["rtt_us"] > 0


def test_64_streams(echo_server, certs):
    with tcpls.connect(echo_server[0], ca=certs[0], server_name="localhost") as session:
        streams = [session.open_stream() for _ in range(64)]
        sent = [pattern(20000 + 997 * i, i) for i in range(64)]
        for stream, data in zip(streams, sent):
            stream.write(data)
            stream.finish()
        for stream, data in zip(streams, sent):
            assert stream.read() == data
        assert len({s.id for s in streams}) == 64


def test_two_paths_with_failover(echo_server, certs):
    first, second = echo_server
    data = [pattern(6 << 20, i) for i in range(4)]
    with tcpls.connect(first, ca=certs[0], server_name="localhost", paths=[f"127.0.0.2@{second}"]) as session:
        session.set_round_robin(True)
        assert [c["id"] for c in session.connections()] == [0, 1]
        streams = [session.open_stream() for _ in data]
        results = [None] * len(data)
        half_sent = threading.Barrier(len(data) + 1)

        def run(i):
            def send():
                half = len(data[i]) // 2
                streams[i].write(data[i][:half])
                half_sent.wait()
                streams[i].write(data[i][half:])
                streams[i].finish()

            writer = threading.Thread(target=send)
            writer.start()
            results[i] = streams[i].read()
            writer.join()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(data))]
        for t in threads:
            t.start()
        half_sent.wait()
        session.abandon_path(1)  # the second path dies in the middle of the transfer
        for t in threads:
            t.join()
        for got, want in zip(results, data):
            assert got == want
        kinds = []
        while True:
            try:
                kinds.append(session.next_event(timeout=0).kind)
            except tcpls.Error:
                break
        assert "path_down" in kinds, kinds


def test_tls_fallback(certs):
    """A plain TLS server (Python's ssl module): the session falls back to one TLS stream."""
    cert, key = certs
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve():
        conn, _ = server.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            data = tls.recv(100)
            tls.sendall(data.upper())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with tcpls.connect(f"127.0.0.1:{port}", ca=cert, server_name="localhost") as session:
        assert session.is_fallback
        stream = session.open_stream()
        stream.write(b"hello")
        assert stream.readexactly(5) == b"HELLO"
        session.abort()
    thread.join(10)
    server.close()


def test_a_wrong_ca_says_what_to_do(echo_server, other_certs):
    with pytest.raises(tcpls.TlsError) as error:
        tcpls.connect(echo_server[0], ca=other_certs[0], server_name="localhost")
    message = str(error.value)
    assert "ca=FILE" in message and "insecure" in message, message


def test_connection_errors(tmp_path, certs):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(tcpls.ConnectError) as error:
        tcpls.connect(f"127.0.0.1:{port}", insecure=True)
    assert isinstance(error.value, ConnectionError) and str(port) in str(error.value)
    with pytest.raises(tcpls.InvalidArgumentError, match="HOST:PORT"):
        tcpls.connect("no-port-here")
    with pytest.raises(tcpls.ConfigError, match="missing.pem"):
        tcpls.connect(f"127.0.0.1:{port}", ca=tmp_path / "missing.pem")
    with pytest.raises(tcpls.ConfigError, match="certificate"):
        tcpls.listen("127.0.0.1:0", tmp_path / "none.pem", tmp_path / "none-key.pem")
    with pytest.raises(TypeError):
        tcpls.connect(None)


def test_a_silent_server_times_out(certs):
    silent = socket.create_server(("127.0.0.1", 0))  # accepts TCP, never answers the handshake
    port = silent.getsockname()[1]
    with pytest.raises(tcpls.TimeoutError) as error:
        tcpls.connect(f"127.0.0.1:{port}", insecure=True, timeout=0.3)
    assert isinstance(error.value, TimeoutError)
    silent.close()


def test_bad_input_raises(echo_server, certs):
    session = tcpls.connect(echo_server[0], ca=certs[0], server_name="localhost")
    stream = session.open_stream()
    with pytest.raises(tcpls.InvalidArgumentError):
        stream.read(0)
    with pytest.raises(tcpls.InvalidArgumentError, match="at most"):
        stream.read(1 << 40)
    with pytest.raises(tcpls.InvalidArgumentError):
        stream.read(1, timeout=-1.0)
    with pytest.raises(tcpls.TimeoutError):
        stream.read(10, timeout=0.05)

    # One reader at a time: a second concurrent reader is refused.
    first_result = []

    def first_reader():
        while True:
            try:
                stream.read(10, timeout=3.0)
            except tcpls.BusyError:
                continue  # the main thread's quick attempt held the reading side for a moment
            except tcpls.Error as e:
                first_result.append(e)
                return

    first = threading.Thread(target=first_reader)
    first.start()
    busy = None
    deadline = time.monotonic() + 2.5
    while busy is None and time.monotonic() < deadline:
        try:
            stream.read(10, timeout=0)
        except tcpls.BusyError as e:
            busy = e
        except tcpls.TimeoutError:
            pass
    first.join()
    assert busy is not None and "one reader and one writer" in str(busy)
    assert isinstance(first_result[0], tcpls.TimeoutError), first_result

    stream.finish()
    with pytest.raises(tcpls.ClosedError):
        stream.write(b"after finish")
    stream.close()
    with pytest.raises(tcpls.ClosedError):
        stream.read(10)
    session.close()
    with pytest.raises(tcpls.ClosedError):
        session.open_stream()
    with pytest.raises(tcpls.ClosedError):
        session.close()


def test_server_and_client_in_python_exchange_events(certs):
    cert, key = certs
    with tcpls.listen("127.0.0.1:0", cert, key) as listener:
        done = threading.Event()

        def serve():
            with listener.accept(timeout=10) as session:
                stream = session.accept_stream(timeout=10)
                assert stream.read() == b"question"
                stream.write(b"answer")
                stream.finish()
                done.wait(10)

        server = threading.Thread(target=serve)
        server.start()
        with tcpls.connect(listener.addresses[0], ca=cert, server_name="localhost") as session:
            stream = session.open_stream()
            stream.write(b"question")
            stream.finish()
            assert stream.read() == b"answer"
            done.set()
        server.join()


def test_migration_events(echo_server, certs):
    first, second = echo_server
    with tcpls.connect(first, ca=certs[0], server_name="localhost", paths=[f"127.0.0.2@{second}"]) as session:
        assert session.next_event(timeout=5) == tcpls.Event("path_up", 1, 0, "")
        stream = session.open_stream()
        stream.steer(0)
        assert session.next_event(timeout=5) == tcpls.Event("migration", 0, stream.id, "")
        stream.write(b"before ")
        session.migrate(0, 1)
        assert session.next_event(timeout=5) == tcpls.Event("migration", 1, stream.id, "")
        stream.write(b"after")
        stream.finish()
        assert stream.read() == b"before after"
        event = session.next_event(timeout=5)
        assert (event.kind, event.conn) == ("path_down", 0), event
        assert [c["id"] for c in session.connections() if c["usable"]] == [1]
