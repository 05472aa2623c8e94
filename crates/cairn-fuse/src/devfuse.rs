//! The classic transport: requests read from `/dev/fuse` one at a time, each answered
//! with one `writev`. With io_uring on it still carries what the kernel never sends
//! through the rings (FORGET, INTERRUPT) and the notifications.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use zerocopy::{FromBytes, IntoBytes};

use crate::abi::InHeader;
use crate::filesystem::CairnFuse;
use crate::reply::{self, Answer};
use crate::request::{decode, Body};

/// Reads one request into `buf`: its length, `Ok(None)` once the file system is
/// unmounted (ENODEV); a request the kernel withdrew meanwhile (ENOENT) or a signal
/// (EINTR) reads again.
pub(crate) fn read_request(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: reads at most buf.len() bytes into buf, which outlives the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::EINTR | libc::EAGAIN) => continue,
            Some(libc::ENODEV) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Writes `parts` as one message (a reply or a notification). ENOENT (the request
/// was interrupted and is gone) is not an error.
pub(crate) fn write_message(fd: &OwnedFd, parts: &[&[u8]]) -> io::Result<()> {
    let iov: Vec<libc::iovec> = parts
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    // SAFETY: the iovecs point into `parts`, alive and unchanged during the call.
    let n = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
    if n >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(()),
        _ => Err(e),
    }
}

/// Sends the notification an answer asks for (after its reply): the kernel drops its
/// cached attributes of `inval`.
pub(crate) fn notify(fd: &OwnedFd, inval: Option<u64>) {
    if let Some(ino) = inval {
        if let Err(e) = write_message(fd, &[&reply::inval_inode(ino)]) {
            log::debug!("invalidating inode {ino}: {e}");
        }
    }
}

/// Decodes and serves one request of `bytes`, the whole message read.
pub(crate) fn serve_one(fd: &OwnedFd, fuse: &CairnFuse, bytes: &[u8]) -> io::Result<()> {
    let Ok((h, body)) = InHeader::read_from_prefix(bytes) else {
        log::warn!("a FUSE request of {} bytes is too short", bytes.len());
        return Ok(());
    };
    let end = (h.len as usize).clamp(bytes.len() - body.len(), bytes.len());
    let body = &bytes[bytes.len() - body.len()..end];
    crate::stats::count_via(false);
    let answer = match decode(&h, Body::joined(body)) {
        Ok(op) => fuse.handle(&h, op),
        Err(e) => Answer::reply(Err(e)),
    };
    if let Some(r) = &answer.reply {
        let head = reply::header(h.unique, r);
        let payload: &[u8] = r.as_deref().unwrap_or(&[]);
        if let Err(e) = write_message(fd, &[head.as_bytes(), payload]) {
            if e.raw_os_error() == Some(libc::ENODEV) {
                return Err(e);
            }
            log::warn!(
                "replying to FUSE request {} (opcode {}): {e}",
                h.unique,
                h.opcode
            );
        }
    }
    notify(fd, answer.inval);
    Ok(())
}

/// Serves requests read from `fd` until the file system is unmounted.
pub(crate) fn serve(fd: &OwnedFd, fuse: &CairnFuse, bufsize: usize) -> io::Result<()> {
    let mut buf = vec![0u8; bufsize];
    while let Some(n) = read_request(fd, &mut buf)? {
        match serve_one(fd, fuse, &buf[..n]) {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => break,
            r => r?,
        }
    }
    Ok(())
}
