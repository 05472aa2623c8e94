//! A mount's session with the kernel: the INIT handshake on `/dev/fuse`, then the
//! transport serving the requests — io_uring queues where the kernel offers them and the
//! mount wants them, else `/dev/fuse` reads — until the file system is unmounted.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zerocopy::{FromBytes, IntoBytes};

use crate::abi::{self, init, InHeader};
use crate::devfuse::{read_request, serve, serve_beside_rings, write_message, Read};
use crate::filesystem::CairnFuse;
use crate::reply;
use crate::request::{decode, Body, Op};
use crate::Transport;

/// The largest WRITE (and READ) request, bytes: 256 pages.
pub(crate) const MAX_WRITE: u32 = 1 << 20;

/// Where the kernel's switch for FUSE over io_uring is.
pub const URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// What INIT settled.
pub(crate) struct Conn {
    /// Serve through io_uring.
    pub uring: bool,
}

/// What a mount asks of the kernel beside the protocol.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wants {
    /// The kernel caches writes (`writeback_cache`).
    pub writeback: bool,
    /// Listings are READDIRPLUS (the file system lists attributes).
    pub readdirplus: bool,
}

/// Buffer for one request read from `/dev/fuse`: the largest write and its headers.
fn read_buffer_size() -> usize {
    MAX_WRITE as usize + 64 * 1024
}

/// Reads requests until INIT and answers it: the protocol version, 1 MiB requests,
/// io_uring when `transport` allows it and the kernel offers it, and the kernel's
/// write cache when `wants.writeback` asks for it, READDIRPLUS when `wants.readdirplus`
/// does. Err when the kernel is too old, the session ends first, or `Transport::Uring`
/// was asked for and the kernel does not offer it.
pub(crate) fn handshake(fd: &OwnedFd, transport: Transport, wants: Wants) -> io::Result<Conn> {
    let mut buf = vec![0u8; read_buffer_size()];
    loop {
        let n = match read_request(fd, &mut buf)? {
            Read::Request(n) => n,
            Read::Empty => continue,
            Read::Gone => return Err(io::Error::other("unmounted before the kernel's INIT")),
        };
        let bytes = &buf[..n];
        let (h, body) = InHeader::read_from_prefix(bytes)
            .map_err(|_| io::Error::other("a FUSE request shorter than its header"))?;
        let (major, minor, max_readahead, flags) = match decode(&h, Body::joined(body)) {
            Ok(Op::Init {
                major,
                minor,
                max_readahead,
                flags,
            }) => (major, minor, max_readahead, flags),
            _ => {
                // Nothing but INIT comes first; answer anything else EIO.
                let r = Err(libc::EIO);
                write_message(fd, &[reply::header(h.unique, &r).as_bytes()])?;
                continue;
            }
        };
        let answer = |r: reply::Reply| {
            write_message(
                fd,
                &[
                    reply::header(h.unique, &r).as_bytes(),
                    r.as_deref().unwrap_or(&[]),
                ],
            )
        };
        if major > abi::MAJOR {
            // The kernel sends INIT again with ours.
            let out = abi::InitOut {
                major: abi::MAJOR,
                minor: abi::MINOR,
                ..Default::default()
            };
            answer(Ok(out.as_bytes().to_vec()))?;
            continue;
        }
        if major < abi::MAJOR || minor < abi::MIN_MINOR {
            answer(Err(libc::EPROTO))?;
            return Err(io::Error::other(format!(
                "the kernel's FUSE protocol {major}.{minor} is older than 7.{}",
                abi::MIN_MINOR
            )));
        }
        // Offered by the kernel, and rings can be made here (once agreed, the kernel
        // holds every request until the rings are up).
        let usable = match (flags & init::OVER_IO_URING != 0, transport) {
            (_, Transport::Classic) => Ok(()),
            (false, _) => Err(uring_off(std::fs::read_to_string(URING_SWITCH))),
            (true, _) => crate::uring::probe().map_err(|e| {
                format!("FUSE over io_uring is offered but no ring can be made here ({e})")
            }),
        };
        let uring = match (transport, usable) {
            (Transport::Classic, _) => false,
            (_, Ok(())) => true,
            (Transport::Uring, Err(why)) => {
                answer(Err(libc::EPROTO))?;
                return Err(io::Error::other(why));
            }
            (Transport::Auto, Err(why)) => {
                log::warn!("{why}; serving through /dev/fuse reads");
                false
            }
        };
        let mut want = init::ASYNC_READ | init::BIG_WRITES | (flags & init::MAX_PAGES);
        if uring {
            want |= init::INIT_EXT | init::OVER_IO_URING;
        }
        if wants.writeback {
            want |= init::WRITEBACK_CACHE;
        }
        if wants.readdirplus {
            want |= init::DO_READDIRPLUS;
        }
        let want = want & (flags | init::INIT_EXT);
        let out = abi::InitOut {
            major: abi::MAJOR,
            minor: minor.min(abi::MINOR),
            max_readahead,
            flags: want as u32,
            max_background: 16,
            congestion_threshold: 12,
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: (MAX_WRITE.max(max_readahead).div_ceil(4096)) as u16,
            flags2: (want >> 32) as u32,
            ..Default::default()
        };
        answer(Ok(out.as_bytes().to_vec()))?;
        return Ok(Conn { uring });
    }
}

/// Why FUSE over io_uring can't be used for a new mount here (the kernel's switch off
/// or missing), with how to turn it on; `None` when it can.
pub(crate) fn uring_unavailable() -> Option<String> {
    let switch = std::fs::read_to_string(URING_SWITCH);
    match &switch {
        Ok(s) if s.trim() == "Y" => None,
        _ => Some(uring_off(switch)),
    }
}

/// Why io_uring is not used (`switch`: what [`URING_SWITCH`] read), and how to turn it
/// on.
fn uring_off(switch: io::Result<String>) -> String {
    let state = switch
        .map(|s| format!("{URING_SWITCH} is {}", s.trim()))
        .unwrap_or_else(|_| {
            format!("this kernel has no {URING_SWITCH} (Linux 6.14 or later has it)")
        });
    format!(
        "FUSE over io_uring is off ({state}); as root, `echo Y > {URING_SWITCH}` turns it on \
         for later mounts"
    )
}

/// Serves the session on `fd` after INIT until the file system is unmounted: with
/// io_uring, one pinned thread per queue and this thread reading `/dev/fuse` for what
/// comes that way; else this thread alone.
pub(crate) fn run(fd: OwnedFd, fuse: Arc<CairnFuse>, conn: &Conn) -> io::Result<()> {
    if !conn.uring {
        return serve(&fd, &fuse, read_buffer_size());
    }
    let fd = Arc::new(fd);
    let queues = crate::uring::queues()?;
    // The kernel wants at least max_write and max_pages × 4096 bytes of payload.
    let payload = read_buffer_size();
    let mut threads = Vec::new();
    let rings_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for q in 0..queues {
        let (fd, fuse) = (fd.clone(), fuse.clone());
        let down = rings_down.clone();
        let t = std::thread::Builder::new()
            .name(format!("cairn-fuse-q{q}"))
            .spawn(move || {
                // A queue that cannot start leaves the kernel holding every request
                // (it uses the rings once every queue has an entry): the reader below
                // then ends the mount.
                match crate::uring::serve_queue(fd, fuse, q as u16, payload) {
                    Ok(crate::uring::Ended::Served) => {}
                    Ok(crate::uring::Ended::NotStarted(e)) => {
                        log::error!("FUSE io_uring queue {q} could not start: {e}");
                        down.store(true, std::sync::atomic::Ordering::Release);
                    }
                    Err(e) => log::error!("FUSE io_uring queue {q}: {e}"),
                }
            })?;
        threads.push(t);
    }
    log::debug!("serving through io_uring, {queues} queues");
    let served = serve_beside_rings(&fd, &fuse, read_buffer_size(), &rings_down);
    // The kernel ends the rings' commands when the connection goes; wait for the
    // queue threads, boundedly.
    let deadline = Instant::now() + Duration::from_secs(10);
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !t.is_finished() {
            log::error!("an io_uring queue thread did not end with the session");
        } else if t.join().is_err() {
            log::error!("an io_uring queue thread panicked");
        }
    }
    served
}
