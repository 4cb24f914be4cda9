//! Dangerous hooks for tests: they let a tokio session behave like a hostile peer (the tokio
//! counterpart of `tcpls_proto::Session::danger_seal_raw`). Nothing here is needed to run
//! TCPLS, and nothing here is safe to use in a real application.

use tcpls_proto::ConnId;

use crate::session::Session;

impl Session {
    /// **Dangerous, for tests only.** Seals one application_data record whose content is
    /// `content` (any bytes: frames of our choosing) with the current key of connection `conn`
    /// and lets the driver write it.
    #[doc(hidden)]
    pub fn danger_seal_raw(&self, conn: ConnId, content: &[u8]) -> Result<(), tcpls_proto::Error> {
        let mut inner = self.shared.lock();
        inner.proto.danger_seal_raw(conn, tcpls_proto::record::CT_APPLICATION_DATA, content)?;
        inner.wake_driver();
        Ok(())
    }

    /// **For tests.** Entries held for the answers to our probes (RTT, TCP Info, Address Echo),
    /// over all connections: bounded by the number of connections whatever the peer sends.
    #[doc(hidden)]
    pub fn danger_probe_answer_entries(&self) -> usize {
        self.shared.lock().ext.entries()
    }

    /// **For tests.** Bytes of sealed records waiting to be written on connection `conn`.
    #[doc(hidden)]
    pub fn danger_transmit_pending(&self, conn: ConnId) -> usize {
        self.shared.lock().proto.transmit_data(conn).len()
    }
}
