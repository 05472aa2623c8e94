//! The value type returned by reads.

use std::ops::Deref;

/// A value read from the store. Dereferences to `[u8]`; holds the record it was read
/// from, so reading it costs no extra copy.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairn::Db::open(dir.path())?;
/// db.put("k", "hello")?;
/// let v = db.get("k")?.unwrap();
/// assert_eq!(&*v, b"hello");
/// assert_eq!(v.into_vec(), b"hello".to_vec());
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone)]
pub struct Value {
    buf: Vec<u8>,
    start: usize,
}

impl Value {
    pub(crate) fn new(buf: Vec<u8>, start: usize) -> Value {
        Value { buf, start }
    }

    /// The value as an owned vector.
    pub fn into_vec(mut self) -> Vec<u8> {
        if self.start == 0 {
            self.buf
        } else {
            self.buf.split_off(self.start)
        }
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Value({:?})", self.deref().escape_ascii().to_string())
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        **self == **other
    }
}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        &**self == other
    }
}

impl Eq for Value {}
