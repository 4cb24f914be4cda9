//! The record layer of an established TCPLS connection: its keys, record numbers across key
//! updates, and the post-handshake messages (session tickets, KeyUpdate).

use crate::error::TransportError;
use crate::record::{RecordKey, TxBuf, CT_HANDSHAKE, HS_KEY_UPDATE, HS_NEW_SESSION_TICKET};
use crate::tls::Kernel;

/// Our record layer on an established TCPLS connection.
#[derive(Debug)]
pub(in crate::session) struct RecordLayer {
    pub(in crate::session) tx: RecordKey,
    pub(in crate::session) rx: RecordKey,
    pub(super) kernel: Kernel,
    /// Sequence number at which the current sending key was installed.
    pub(super) tx_key_since: u64,
    /// Records sealed (tx) and opened (rx) under earlier key generations: record numbers run
    /// on across KeyUpdate (which restarts TLS sequence numbers) so ACKs stay unambiguous.
    pub(super) tx_base: u64,
    pub(super) rx_base: u64,
    pub(in crate::session) key_updates_sent: u64,
    pub(in crate::session) key_updates_received: u64,
    /// `key_updates_sent` after our last KeyUpdate that answered a request: while nothing was
    /// sealed since, further requests get no new answer (RFC 8446 §4.6.3: a silent receiver of
    /// several requests responds with a single update), so a peer cannot make us rotate keys
    /// once per request it sends.
    pub(super) answered_update: Option<u64>,
}

impl RecordLayer {
    pub(super) fn new(tx: RecordKey, rx: RecordKey, kernel: Kernel) -> Self {
        let tx_key_since = tx.seq();
        Self {
            tx,
            rx,
            kernel,
            tx_key_since,
            tx_base: 0,
            rx_base: 0,
            key_updates_sent: 0,
            key_updates_received: 0,
            answered_update: None,
        }
    }

    /// Number the next sealed record gets (monotonic over the connection's life).
    pub(in crate::session) fn next_tx_number(&self) -> u64 {
        self.tx_base + self.tx.seq()
    }

    /// Number of the next record opened (monotonic over the connection's life).
    pub(super) fn next_rx_number(&self) -> u64 {
        self.rx_base + self.rx.seq()
    }

    /// Rotates our sending key when it has protected `limit` records (KeyUpdate, RFC 8446 §4.6.3).
    pub(super) fn maybe_update_key(&mut self, limit: u64, tx: &mut TxBuf) -> Result<(), TransportError> {
        if self.tx.seq().saturating_sub(self.tx_key_since) >= limit {
            send_key_update(self, false, tx)?;
        }
        Ok(())
    }
}

pub(super) fn send_key_update(
    layer: &mut RecordLayer,
    request_update: bool,
    tx: &mut TxBuf,
) -> Result<(), TransportError> {
    layer.tx.seal(CT_HANDSHAKE, &[HS_KEY_UPDATE, 0, 0, 1, request_update as u8], tx)?;
    layer.tx_base += layer.tx.seq();
    layer.tx = layer.kernel.next_tx_key()?;
    layer.tx_key_since = layer.tx.seq();
    layer.key_updates_sent += 1;
    Ok(())
}

/// Handshake messages after the handshake: session tickets and KeyUpdate (RFC 8446 §4.6).
pub(super) fn post_handshake(
    layer: &mut RecordLayer,
    mut content: &[u8],
    tx: &mut TxBuf,
    may_send: bool,
) -> Result<(), TransportError> {
    if content.is_empty() {
        return Err(TransportError::unexpected("empty handshake record"));
    }
    while !content.is_empty() {
        let [msg_type, a, b, c, rest @ ..] = content else {
            return Err(TransportError::decode("truncated handshake message header"));
        };
        let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
        let Some(body) = rest.get(..len) else {
            // rustls never splits these messages across records; neither do we accept it.
            return Err(TransportError::decode("handshake message spans records"));
        };
        content = &rest[len..];
        match *msg_type {
            HS_NEW_SESSION_TICKET => layer.kernel.handle_new_session_ticket(body)?,
            HS_KEY_UPDATE => {
                let request = match body {
                    [0] => false,
                    [1] => true,
                    // RFC 8446 §4.6.3: a request_update other than 0 or 1 is illegal_parameter;
                    // only a body of the wrong length is a decode_error.
                    [_] => return Err(TransportError::illegal("KeyUpdate request_update is not 0 or 1")),
                    _ => return Err(TransportError::decode("malformed KeyUpdate")),
                };
                if !content.is_empty() {
                    return Err(TransportError::unexpected("KeyUpdate not at the end of its record"));
                }
                layer.rx_base += layer.rx.seq();
                layer.rx = layer.kernel.next_rx_key()?;
                layer.key_updates_received += 1;
                let silent_since_answer =
                    layer.answered_update == Some(layer.key_updates_sent) && layer.tx.seq() == layer.tx_key_since;
                if request && may_send && !silent_since_answer {
                    send_key_update(layer, false, tx)?;
                    layer.answered_update = Some(layer.key_updates_sent);
                }
            }
            other => return Err(TransportError::unexpected(format!("handshake message {other} after the handshake"))),
        }
    }
    Ok(())
}
