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

/// What one read of `/dev/fuse` gave.
pub(crate) enum Read {
    /// A request of this many bytes.
    Request(usize),
    /// Nothing yet (a descriptor without `O_NONBLOCK` never gives this).
    Empty,
    /// The file system is unmounted (ENODEV).
    Gone,
}

/// Reads one request into `buf`; a request the kernel withdrew meanwhile (ENOENT) or a
/// signal (EINTR) reads again.
pub(crate) fn read_request(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Read> {
    loop {
        // SAFETY: reads at most buf.len() bytes into buf, which outlives the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Read::Request(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(Read::Empty),
            Some(libc::ENODEV) => return Ok(Read::Gone),
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
        if let Err(e) = write_message(fd, &[&reply::inval_inode(ino, false)]) {
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

/// Serves what comes through `fd` beside the io_uring queues (FORGET, BATCH_FORGET,
/// INTERRUPT, and requests sent before the rings were ready) until the file system is
/// unmounted, without ever waiting in read(2): a reader waiting there is woken by every
/// FORGET — one per inode the kernel evicts, an unlink's for instance — and on this
/// machine waking a thread on another, idle CPU was the largest single cost of an
/// unlink through the rings (8% of all samples). So `fd` is read without blocking, and
/// between empty reads the thread sleeps, from 1 ms up to [`MAX_NAP`] while nothing
/// comes. Nothing cairn does waits on these (it keeps no lookup counts and cannot
/// interrupt a request); an unmount is noticed within one nap. Once `rings_down` is
/// set (a queue could not register after INIT agreed on io_uring, so the kernel holds
/// every request until the rings are up, which they never will be) it returns an error:
/// the mount ends, and with it the connection, so that callers get ENOTCONN instead of
/// waiting forever.
pub(crate) fn serve_beside_rings(
    fd: &OwnedFd,
    fuse: &CairnFuse,
    bufsize: usize,
    rings_down: &std::sync::atomic::AtomicBool,
) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns; O_NONBLOCK only changes reads,
    // which only this thread makes.
    let rc = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; bufsize];
    let mut nap = MIN_NAP;
    loop {
        if rings_down.load(std::sync::atomic::Ordering::Acquire) {
            return Err(io::Error::other(
                "FUSE over io_uring could not start after the kernel agreed to it; the mount \
                 ends (`cairn mount --transport classic` serves without it)",
            ));
        }
        match read_request(fd, &mut buf)? {
            Read::Request(n) => {
                nap = MIN_NAP;
                if !serve_read(fd, fuse, &buf[..n])? {
                    return Ok(());
                }
            }
            Read::Empty => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(MAX_NAP);
            }
            Read::Gone => return Ok(()),
        }
    }
}

/// The first and the longest sleep of [`serve_beside_rings`] between empty reads.
const MIN_NAP: std::time::Duration = std::time::Duration::from_millis(1);
const MAX_NAP: std::time::Duration = std::time::Duration::from_millis(50);

/// [`serve_one`] for the loops: `false` once the file system is gone (its reply met
/// ENODEV).
fn serve_read(fd: &OwnedFd, fuse: &CairnFuse, bytes: &[u8]) -> io::Result<bool> {
    match serve_one(fd, fuse, bytes) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(false),
        r => r.map(|()| true),
    }
}

/// Serves requests read from `fd` until the file system is unmounted.
pub(crate) fn serve(fd: &OwnedFd, fuse: &CairnFuse, bufsize: usize) -> io::Result<()> {
    let mut buf = vec![0u8; bufsize];
    loop {
        match read_request(fd, &mut buf)? {
            Read::Request(n) => {
                if !serve_read(fd, fuse, &buf[..n])? {
                    return Ok(());
                }
            }
            Read::Empty => {}
            Read::Gone => return Ok(()),
        }
    }
}
