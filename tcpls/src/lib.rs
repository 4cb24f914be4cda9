pub use tcpls_proto;
