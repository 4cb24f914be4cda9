//! Frame decoding errors.

use std::fmt;

/// Why a record plaintext could not be parsed into frames.
///
/// Every variant is fatal for the connection (TLS alert decode_error, PROTOCOL.md §6): since
/// frames are parsed from the end, one bad frame leaves the reader unable to find the frames before
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The type byte is not in the frame table.
    UnknownType(u8),
    /// A fixed-size field runs past the start of the plaintext.
    Truncated { frame_type: u8 },
    /// A field holds a value the frame cannot have, or a length field points past the start of the
    /// plaintext.
    Malformed { frame_type: u8, what: &'static str },
}

impl FrameError {
    /// The type byte of the frame that failed, for logs and statistics.
    pub fn frame_type(&self) -> u8 {
        match *self {
            Self::UnknownType(t) | Self::Truncated { frame_type: t } | Self::Malformed { frame_type: t, .. } => t,
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownType(t) => write!(f, "unknown frame type {t:#04x}"),
            Self::Truncated { frame_type } => {
                write!(f, "frame of type {frame_type:#04x} runs past the start of the record")
            }
            Self::Malformed { frame_type, what } => {
                write!(f, "malformed frame of type {frame_type:#04x}: {what}")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Error of a frame body decoder, before the reader attaches the type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyError {
    Truncated,
    Malformed(&'static str),
}

impl From<crate::coding::Truncated> for BodyError {
    fn from(_: crate::coding::Truncated) -> Self {
        Self::Truncated
    }
}

impl BodyError {
    pub(super) fn with_type(self, frame_type: u8) -> FrameError {
        match self {
            Self::Truncated => FrameError::Truncated { frame_type },
            Self::Malformed(what) => FrameError::Malformed { frame_type, what },
        }
    }
}
