//! A TCPLS echo server and a client that uses three streams at once, in one program.
//!
//! ```text
//! cargo run --example echo -p tcpls
//! ```

use tcpls::{server_name_for, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A throwaway certificate for localhost and configs around it, from the workspace's test
    // kit (`tcpls-test`); real deployments load theirs (see `tcpls cert`).
    let pki = tcpls_test::Pki::try_new()?;
    let (server_tls, client_tls) = (pki.server(), pki.client());

    // Server: every stream of every session is echoed back.
    let listener = TcplsListener::bind("127.0.0.1:0".parse()?, server_tls).await?;
    let addr = listener.local_addr();
    tokio::spawn(async move {
        while let Some((session, peer)) = listener.accept().await {
            println!("server: session from {peer}");
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut recv, &mut send).await;
                        let _ = send.shutdown().await;
                    });
                }
            });
        }
    });

    // Client: one session, three concurrent streams.
    let session = TcplsConnector::new(client_tls).connect(addr, server_name_for("localhost")?).await?;
    println!("client: connected, ALPN {:?}", session.handshake_info().and_then(|i| i.alpn).map(String::from_utf8));
    let mut tasks = Vec::new();
    for word in ["alpha", "beta", "gamma"] {
        let (mut send, mut recv) = session.open_stream()?;
        tasks.push(tokio::spawn(async move {
            send.write_all(word.as_bytes()).await?;
            send.shutdown().await?;
            let mut echo = String::new();
            recv.read_to_string(&mut echo).await?;
            Ok::<_, std::io::Error>((recv.id(), echo))
        }));
    }
    for t in tasks {
        let (id, echo) = t.await??;
        println!("client: stream {id} echoed {echo:?}");
    }
    if let Some(e) = session.close().await {
        return Err(e.into());
    }
    Ok(())
}
