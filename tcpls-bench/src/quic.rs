//! The QUIC ends of a `compare` transfer: quinn 0.11 over loopback UDP.
//!
//! Configuration (a fair effort at a fast bulk transfer, documented in README.md):
//! * rustls 0.23 with the same aws-lc-rs provider as TLS and TCPLS (TLS 1.3,
//!   TLS13_AES_128_GCM_SHA256 only) and the same certificate; quinn's packet protection is
//!   AES-128-GCM from aws-lc-rs.
//! * One bidirectional stream: the client writes the bytes in 256 KiB `write_all`s and finishes
//!   the stream; the server reads with `read_chunk` (ordered, no copy into a caller's buffer),
//!   replies "done" once it has every byte, and the client closes the connection.
//! * Flow control far from limiting on loopback: 16 MiB stream receive window (as TCPLS'
//!   default `stream_receive_window`), 32 MiB connection receive window, 32 MiB send window.
//! * UDP socket buffers of 8 MiB each way (SO_RCVBUFFORCE / SO_SNDBUFFORCE when allowed, so
//!   that a burst is not dropped by a small `net.core.rmem_max`).
//! * Segmentation offload (GSO) and GRO on (quinn's defaults); quinn's default congestion
//!   controller (CUBIC) and ACK policy. UDP payloads: MTU discovery up to 1452 bytes (quinn's
//!   default, what an Ethernet path allows) for `quic`; 8952 bytes from the start for `quic-9k`
//!   (initial MTU, MTU discovery bound and `EndpointConfig::max_udp_payload_size` of both ends).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Endpoint, EndpointConfig, TokioRuntime, TransportConfig, VarInt};

use crate::pki::{Pki, SERVER_NAME};
use crate::proto::{Proto, SideReport};
use crate::side::{announce, localhost, write_payload, Counter, DONE};
use crate::sys::{force_socket_buffers, monotonic_ns, Cpu};
use crate::Res;

/// Socket buffer size asked for, each way.
const SOCKET_BUFFER: usize = 8 << 20;

/// UDP payload size of `quic-9k`: a 9000-byte MTU less IPv6 and UDP headers.
const JUMBO_PAYLOAD: u16 = 8952;

fn transport(proto: Proto) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.stream_receive_window(VarInt::from_u32(16 << 20));
    t.receive_window(VarInt::from_u32(32 << 20));
    t.send_window(32 << 20);
    if proto == Proto::Quic9k {
        t.initial_mtu(JUMBO_PAYLOAD);
        let mut mtud = quinn::MtuDiscoveryConfig::default();
        mtud.upper_bound(JUMBO_PAYLOAD);
        t.mtu_discovery_config(Some(mtud));
    }
    t
}

fn udp_socket(addr: SocketAddr) -> Res<UdpSocket> {
    let socket = UdpSocket::bind(addr)?;
    force_socket_buffers(&socket, SOCKET_BUFFER);
    Ok(socket)
}

fn endpoint(proto: Proto, server: Option<quinn::ServerConfig>) -> Res<Endpoint> {
    let socket = udp_socket(localhost())?;
    let mut config = EndpointConfig::default();
    if proto == Proto::Quic9k {
        // What we accept from the peer (a transport parameter); the default is 1472.
        config.max_udp_payload_size(JUMBO_PAYLOAD)?;
    }
    Ok(Endpoint::new(config, server, socket, Arc::new(TokioRuntime))?)
}

pub async fn server(proto: Proto, pki: &Pki, counter: &Counter) -> Res<SideReport> {
    let crypto = QuicServerConfig::try_from(pki.server_config()?)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport(proto)));
    let endpoint = endpoint(proto, Some(config))?;
    announce(endpoint.local_addr()?.port())?;
    let incoming = endpoint.accept().await.ok_or("QUIC endpoint closed before a connection")?;
    let conn = incoming.await?;
    let cpu0 = Cpu::now();
    let (mut send, mut recv) = conn.accept_bi().await?;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        counter.add(chunk.bytes.len());
    }
    let report = counter.finish(cpu0);
    send.write_all(DONE).await?;
    send.finish()?;
    // The client closes once it has the reply; then let the close finish.
    conn.closed().await;
    endpoint.wait_idle().await;
    Ok(report)
}

/// Returns the time and CPU at the first write.
pub async fn client(proto: Proto, pki: &Pki, addr: SocketAddr, bytes: u64) -> Res<(u64, Cpu)> {
    let crypto = QuicClientConfig::try_from(pki.client_config()?)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(transport(proto)));
    let mut endpoint = endpoint(proto, None)?;
    endpoint.set_default_client_config(config);
    let conn = endpoint.connect(addr, SERVER_NAME)?.await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let start = (monotonic_ns(), Cpu::now());
    write_payload(&mut send, bytes).await?;
    send.finish()?;
    let reply = recv.read_to_end(DONE.len()).await?;
    if reply != DONE {
        return Err(format!("QUIC server replied {reply:?} instead of \"done\"").into());
    }
    conn.close(VarInt::from_u32(0), b"done");
    endpoint.wait_idle().await;
    Ok(start)
}
