//! [`Loc`]: where a record is, the value every index maps a key to.

/// Location of a record: segment id, byte offset of the record in the segment file, record
/// length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, zerocopy::FromZeros)]
pub struct Loc {
    /// Id of the segment file holding the record.
    pub seg: u32,
    /// Byte offset of the record in the segment file.
    pub off: u32,
    /// Length of the record in bytes.
    pub len: u32,
}
