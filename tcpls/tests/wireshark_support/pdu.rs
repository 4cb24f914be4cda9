//! A pcap of record contents handed straight to the `tcpls` dissector, without TCP or TLS:
//! link type 252 (Wireshark "exported PDU"), each packet tagged with the dissector's name.
use std::path::Path;

/// LINKTYPE_WIRESHARK_UPPER_PDU.
const LINKTYPE_EXPORTED_PDU: u32 = 252;
/// EXP_PDU_TAG_DISSECTOR_NAME: the value names the dissector that gets the payload.
const TAG_DISSECTOR_NAME: u16 = 12;

pub fn write_exported_pdus(path: &Path, records: &[Vec<u8>]) -> std::io::Result<()> {
    let mut out = Vec::new();
    // pcap global header (little endian): magic, version 2.4, zone, sigfigs, snaplen, link type.
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&262_144u32.to_le_bytes());
    out.extend_from_slice(&LINKTYPE_EXPORTED_PDU.to_le_bytes());
    for record in records {
        let name = b"tcpls";
        let mut packet = Vec::new();
        packet.extend_from_slice(&TAG_DISSECTOR_NAME.to_be_bytes());
        packet.extend_from_slice(&(name.len() as u16).to_be_bytes());
        packet.extend_from_slice(name);
        packet.extend_from_slice(&[0; 4]); // end of options: tag 0, length 0
        packet.extend_from_slice(record);
        out.extend_from_slice(&[0; 8]); // timestamp
        out.extend_from_slice(&(packet.len() as u32).to_le_bytes());
        out.extend_from_slice(&(packet.len() as u32).to_le_bytes());
        out.extend_from_slice(&packet);
    }
    std::fs::write(path, out)
}
