//! The metrics endpoint: `GET /metrics` over plain HTTP/1.1, one request per connection.
//! Requests are parsed by `httparse`; a request head is read within 5 s and 8 KiB, at most 64
//! scrapes are answered at once, so a slow or hostile client costs bounded memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::ServerMetrics;

const MAX_HEAD: usize = 8 << 10;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CONCURRENT: usize = 64;
const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Listens on `addr` and answers scrapes in the background; returns the bound address.
pub async fn serve_metrics(addr: SocketAddr, metrics: ServerMetrics) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(addr).await.map_err(|e| format!("metrics: cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| format!("metrics: {e}"))?;
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else { return };
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(HEAD_TIMEOUT, answer(stream, &metrics)).await;
                drop(permit);
            });
        }
    });
    Ok(bound)
}

async fn answer(mut stream: TcpStream, metrics: &ServerMetrics) -> std::io::Result<()> {
    let mut head = vec![0u8; MAX_HEAD];
    let mut len = 0;
    let (status, body) = loop {
        let n = stream.read(&mut head[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head[..len]) {
            Ok(httparse::Status::Complete(_)) => break route(request.method, request.path, metrics),
            Ok(httparse::Status::Partial) if len < head.len() => continue,
            Ok(httparse::Status::Partial) => break ("431 Request Header Fields Too Large", String::new()),
            Err(_) => break ("400 Bad Request", String::new()),
        }
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn route(method: Option<&str>, path: Option<&str>, metrics: &ServerMetrics) -> (&'static str, String) {
    let path = path.unwrap_or("/").split('?').next().unwrap_or("/");
    match (method, path) {
        (Some("GET"), "/metrics" | "/") => ("200 OK", metrics.render()),
        (Some("GET"), _) => ("404 Not Found", "only /metrics is served here\n".into()),
        _ => ("405 Method Not Allowed", String::new()),
    }
}
