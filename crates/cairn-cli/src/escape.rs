//! One-line rendering of arbitrary bytes for `scan` output and messages.
//!
//! Printable UTF-8 passes through unchanged. A backslash becomes `\\`; tab, newline
//! and carriage return become `\t`, `\n` and `\r`; every other control character and
//! every byte that is not part of valid UTF-8 becomes `\xNN`. The rendering therefore
//! never contains a tab or a line break, and it can be decoded back unambiguously.

use std::io::{self, Write};

/// Writes `bytes` to `out` in the escaped one-line form described in the module docs.
pub fn write_escaped<W: Write + ?Sized>(out: &mut W, bytes: &[u8]) -> io::Result<()> {
    for chunk in bytes.utf8_chunks() {
        let text = chunk.valid();
        let mut plain_from = 0;
        for (at, c) in text.char_indices() {
            if !needs_escape(c) {
                continue;
            }
            out.write_all(&text.as_bytes()[plain_from..at])?;
            plain_from = at + c.len_utf8();
            match c {
                '\\' => out.write_all(b"\\\\")?,
                '\t' => out.write_all(b"\\t")?,
                '\n' => out.write_all(b"\\n")?,
                '\r' => out.write_all(b"\\r")?,
                _ => {
                    let mut buf = [0; 4];
                    write_hex(out, c.encode_utf8(&mut buf).as_bytes())?;
                }
            }
        }
        out.write_all(&text.as_bytes()[plain_from..])?;
        write_hex(out, chunk.invalid())?;
    }
    Ok(())
}

/// Returns the escaped one-line form of `bytes` as a string.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    // Writing to a Vec cannot fail.
    let _ = write_escaped(&mut out, bytes);
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a character is shown as an escape sequence rather than as itself.
fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control()
}

/// Writes each byte as `\xNN`.
fn write_hex<W: Write + ?Sized>(out: &mut W, bytes: &[u8]) -> io::Result<()> {
    for b in bytes {
        write!(out, "\\x{b:02x}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn printable_text_is_unchanged() {
        assert_eq!(escape(b"hello world"), "hello world");
        assert_eq!(escape("grüße, 日本".as_bytes()), "grüße, 日本");
        assert_eq!(escape(b""), "");
    }

    #[test]
    fn specials_are_escaped() {
        assert_eq!(escape(b"a\tb\nc\rd\\e"), "a\\tb\\nc\\rd\\\\e");
        assert_eq!(escape(b"\x00\x01\x7f"), "\\x00\\x01\\x7f");
        assert_eq!(escape("\u{85}".as_bytes()), "\\xc2\\x85");
    }

    #[test]
    fn invalid_utf8_is_escaped_bytewise() {
        assert_eq!(escape(b"ok\xff\xfeok"), "ok\\xff\\xfeok");
        assert_eq!(escape(b"\xe6\x97"), "\\xe6\\x97");
    }
}
