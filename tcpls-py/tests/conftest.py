"""Fixtures: throw-away certificates (made with the openssl command line tool) and a TCPLS
echo server written with this package, on 127.0.0.1 and 127.0.0.2."""

import shutil
import subprocess
import threading

import pytest

import tcpls


def make_cert(directory, name):
    """A self-signed certificate for localhost and 127.0.0.1: (cert.pem, key.pem)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line tool is not installed (apt-get install openssl)")
    cert, key = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-subj", f"/CN={name}", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:FALSE", "-days", "2",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("certs"), "server")


@pytest.fixture(scope="session")
def other_certs(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("other"), "other")


def serve_echo(listener):
    """Echoes every stream of every session, each in a thread of its own."""

    def echo(stream):
        with stream:
            while True:
                data = stream.read(1 << 20)
                if not data:
                    break
                stream.write(data)
            stream.finish()

    def serve(session):
        with session:
            while True:
                try:
                    stream = session.accept_stream()
                except tcpls.SessionEndedError:
                    return
                threading.Thread(target=echo, args=(stream,), daemon=True).start()

    def accept_forever():
        while True:
            try:
                session = listener.accept()
            except tcpls.Error:
                return
            threading.Thread(target=serve, args=(session,), daemon=True).start()

    threading.Thread(target=accept_forever, daemon=True).start()


@pytest.fixture
def echo_server(certs):
    """A TCPLS echo server in Python on 127.0.0.1 and 127.0.0.2: yields its two addresses."""
    cert, key = certs
    listener = tcpls.listen("127.0.0.1:0", cert, key, also=["127.0.0.2:0"])
    serve_echo(listener)
    yield listener.addresses
    listener.close()


def pattern(n, seed):
    """n bytes that differ by seed and position (a reordered or misplaced byte is caught)."""
    block = bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(65536 + seed))
    return (block * (n // len(block) + 1))[:n]
