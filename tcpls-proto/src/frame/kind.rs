//! The frame type byte.

use crate::wire_enum::wire_enum;

wire_enum! {
    /// The last byte of every frame, which tells the reader how to parse the bytes before it.
    ///
    /// There is no `Unknown` variant: an unknown type is fatal (PROTOCOL.md §6) because the reader
    /// cannot know its length and so cannot skip it. [`FrameType::from_u8`] is `None` for bytes
    /// outside the table (0x0A..=0x0F and 0x1F..=0xFF).
    pub enum FrameType {
        Padding = 0x00,
        Ping = 0x01,
        Stream = 0x02,
        StreamFin = 0x03,
        Ack = 0x04,
        NewToken = 0x05,
        ConnectionReset = 0x06,
        NewAddress = 0x07,
        RemoveAddress = 0x08,
        StreamChange = 0x09,
        Join = 0x10,
        StreamReset = 0x11,
        MaxStreamData = 0x12,
        UserTimeout = 0x13,
        RttProbe = 0x14,
        RttEcho = 0x15,
        TcpInfoRequest = 0x16,
        TcpInfo = 0x17,
        AddressProbe = 0x18,
        AddressEcho = 0x19,
        RateLimit = 0x1A,
        CongestionControl = 0x1B,
        StreamSteer = 0x1C,
        PathPriority = 0x1D,
        Rejoin = 0x1E,
    }
}

impl FrameType {
    /// See [`super::Frame::is_ack_eliciting`]; available on the type so a receiver can decide
    /// before it has the whole frame.
    pub fn is_ack_eliciting(self) -> bool {
        !matches!(self, Self::Padding | Self::Ack)
    }
}
