//! TM3: application TCP connections multiplexed over N long-lived TCP *pipes* in the original
//! TM3 pipe protocol (CSCI-P 538, project 3). A local proxy (`lp`) accepts the connections and
//! a remote proxy (`rp`) opens them to their destinations; both share the multiplexer (`mux`),
//! which encodes pipe messages (`codec`) and puts each connection's messages back in order
//! (`reorder`). See the crate's `README.md` for the protocol details and the bounds.

pub mod codec;
pub(crate) mod lp;
pub(crate) mod mux;
pub mod reorder;
pub mod rp;
