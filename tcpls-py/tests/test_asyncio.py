"""The asyncio API: `async with await tcpls.aio.connect(...)`, streams with asyncio-like reader
and writer methods, an asyncio server."""

import asyncio

import pytest

import tcpls
import tcpls.aio
from conftest import pattern


def test_async_echo_and_many_streams(echo_server, certs):
    async def main():
        async with await tcpls.aio.connect(echo_server[0], ca=certs[0], server_name="localhost") as session:
            async def one(i):
                stream = await session.open_stream()
                data = pattern(200_000 + i, i)
                writer = asyncio.ensure_future(stream.write(data))
                await writer
                await stream.finish()
                assert await stream.read() == data

            await asyncio.gather(*(one(i) for i in range(16)))
            assert session.connections()[0]["usable"]

    asyncio.run(main())


def test_async_server_and_client(certs):
    cert, key = certs

    async def main():
        async with await tcpls.aio.listen("127.0.0.1:0", cert, key) as listener:
            async def serve():
                async with await listener.accept(timeout=10) as session:
                    stream = await session.accept_stream()
                    request = await stream.readexactly(4)
                    await stream.write(request[::-1])
                    await stream.finish()
                    assert await stream.read() == b""
                    event = await session.next_event()
                    assert event.kind == "stream_opened"

            server = asyncio.ensure_future(serve())
            async with await tcpls.aio.connect(listener.addresses[0], ca=cert, server_name="localhost") as session:
                stream = await session.open_stream()
                await stream.write(b"ping")
                await stream.finish()
                assert await stream.read() == b"gnip"
            await server

    asyncio.run(main())


def test_async_errors(certs, other_certs, echo_server):
    async def main():
        with pytest.raises(tcpls.TlsError, match="ca=FILE"):
            await tcpls.aio.connect(echo_server[0], ca=other_certs[0], server_name="localhost")
        session = await tcpls.aio.connect(echo_server[0], ca=certs[0], server_name="localhost")
        await session.close()
        with pytest.raises(tcpls.ClosedError):
            await session.open_stream()

    asyncio.run(main())
