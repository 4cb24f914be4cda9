//! The frame type byte.

/// The last byte of every frame, which tells the reader how to parse the bytes before it.
///
/// There is no `Unknown` variant: an unknown type is fatal (PROTOCOL.md §6) because the reader
/// cannot know its length and so cannot skip it.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl FrameType {
    /// Every frame type, in type byte order; lets tests and tools cover the whole table.
    pub const ALL: [FrameType; 25] = [
        Self::Padding,
        Self::Ping,
        Self::Stream,
        Self::StreamFin,
        Self::Ack,
        Self::NewToken,
        Self::ConnectionReset,
        Self::NewAddress,
        Self::RemoveAddress,
        Self::StreamChange,
        Self::Join,
        Self::StreamReset,
        Self::MaxStreamData,
        Self::UserTimeout,
        Self::RttProbe,
        Self::RttEcho,
        Self::TcpInfoRequest,
        Self::TcpInfo,
        Self::AddressProbe,
        Self::AddressEcho,
        Self::RateLimit,
        Self::CongestionControl,
        Self::StreamSteer,
        Self::PathPriority,
        Self::Rejoin,
    ];

    /// Parses a type byte; `None` for bytes outside the table (0x0A..=0x0F and 0x1F..=0xFF).
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0x00 => Self::Padding,
            0x01 => Self::Ping,
            0x02 => Self::Stream,
            0x03 => Self::StreamFin,
            0x04 => Self::Ack,
            0x05 => Self::NewToken,
            0x06 => Self::ConnectionReset,
            0x07 => Self::NewAddress,
            0x08 => Self::RemoveAddress,
            0x09 => Self::StreamChange,
            0x10 => Self::Join,
            0x11 => Self::StreamReset,
            0x12 => Self::MaxStreamData,
            0x13 => Self::UserTimeout,
            0x14 => Self::RttProbe,
            0x15 => Self::RttEcho,
            0x16 => Self::TcpInfoRequest,
            0x17 => Self::TcpInfo,
            0x18 => Self::AddressProbe,
            0x19 => Self::AddressEcho,
            0x1A => Self::RateLimit,
            0x1B => Self::CongestionControl,
            0x1C => Self::StreamSteer,
            0x1D => Self::PathPriority,
            0x1E => Self::Rejoin,
            _ => return None,
        })
    }

    /// See [`super::Frame::is_ack_eliciting`]; available on the type so a receiver can decide
    /// before it has the whole frame.
    pub fn is_ack_eliciting(self) -> bool {
        !matches!(self, Self::Padding | Self::Ack)
    }
}

impl From<FrameType> for u8 {
    fn from(t: FrameType) -> u8 {
        t as u8
    }
}
