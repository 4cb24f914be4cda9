//! Address and path frames: New Address, Remove Address, Address Probe, Address Echo, Path
//! Priority.
//!
//! Decoders get the reader positioned just before the type byte and read the fields right to left,
//! i.e. in reverse of the wire order given in each doc comment.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::error::BodyError;
use super::Frame;
use crate::coding::{put_u16, put_u8, TailReader};

/// Bytes of Port(16), Address(32 or 128), Version(8).
pub(super) fn address_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => 2 + 4 + 1,
        SocketAddr::V6(_) => 2 + 16 + 1,
    }
}

/// Writes Port(16), Address(32 or 128), Version(8). IPv6 flow info and scope id are local
/// matters of the sender's host and are not sent.
pub(super) fn put_address(out: &mut Vec<u8>, addr: &SocketAddr) {
    put_u16(out, addr.port());
    match addr {
        SocketAddr::V4(a) => {
            out.extend_from_slice(&a.ip().octets());
            put_u8(out, 4);
        }
        SocketAddr::V6(a) => {
            out.extend_from_slice(&a.ip().octets());
            put_u8(out, 6);
        }
    }
}

/// Reads Port(16), Address(32 or 128), Version(8), right to left. The version is checked before
/// the address is read because it decides the address's width.
fn decode_address(r: &mut TailReader<'_>) -> Result<SocketAddr, BodyError> {
    let ip: IpAddr = match r.u8()? {
        4 => Ipv4Addr::from(*r.array::<4>()?).into(),
        6 => Ipv6Addr::from(*r.array::<16>()?).into(),
        _ => return Err(BodyError::Malformed("address version is not 4 or 6")),
    };
    let port = r.u16()?;
    // For IPv6 this leaves flow info and scope id at 0, as the encoder does not send them.
    Ok(SocketAddr::new(ip, port))
}

/// New Address 0x07: Port(16), Address(32 or 128), Version(8), Address ID(8), Type.
pub(super) fn decode_new_address<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let address_id = r.u8()?;
    let addr = decode_address(r)?;
    Ok(Frame::NewAddress { address_id, addr })
}

/// Remove Address 0x08: Address ID(8), Type.
pub(super) fn decode_remove_address<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let address_id = r.u8()?;
    Ok(Frame::RemoveAddress { address_id })
}

/// Address Probe 0x18: Connection ID(32), Type.
pub(super) fn decode_address_probe<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    Ok(Frame::AddressProbe { connection_id })
}

/// Address Echo 0x19: Port(16), Address(32 or 128), Version(8), Connection ID(32), Type.
pub(super) fn decode_address_echo<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let addr = decode_address(r)?;
    Ok(Frame::AddressEcho { connection_id, addr })
}

/// Path Priority 0x1D: Backup(8), Connection ID(32), Type. Backup is 0 (regular) or 1.
pub(super) fn decode_path_priority<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let backup = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(BodyError::Malformed("path priority is not 0 or 1")),
    };
    Ok(Frame::PathPriority { connection_id, backup })
}
