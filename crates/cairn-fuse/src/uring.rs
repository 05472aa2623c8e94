//! FUSE over io_uring (Linux 6.14+, `/sys/module/fuse/parameters/enable_uring`): one
//! queue per CPU, each served by a thread of its own pinned to that CPU, with
//! [`DEPTH`] ring entries registered with the kernel. A request is queued on the queue
//! of the CPU its caller runs on, so the server thread that wakes for it and the caller
//! that wakes for the reply stay on that CPU (a wake-up across CPUs costs tens of µs on
//! a virtual machine); the reply and the fetch of the next request are one
//! `COMMIT_AND_FETCH` command, with no read(2) or write(2) per request.
//!
//! Each ring entry is a header buffer (the request's `fuse_in_header`, its opcode's
//! fixed structure, the entry's commit id and payload size) and a payload buffer (names
//! and data, both ways) of the connection's largest request; the kernel copies into
//! and out of them. DESIGN.md ("The mount's transport") has the flow, FORMAT.md the
//! layouts.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use zerocopy::{FromBytes, IntoBytes};

use crate::abi::{self, InHeader, OutHeader, UringCmdReq, UringEntInOut};
use crate::devfuse::notify;
use crate::filesystem::CairnFuse;
use crate::reply::{self, Answer, Reply};
use crate::request::{decode, Body};

/// Ring entries per queue: requests the kernel can hand one queue at once.
pub(crate) const DEPTH: usize = 8;

type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Offset of `fuse_uring_ent_in_out` in the header buffer.
const ENT_IN_OUT: usize = abi::URING_IN_OUT_SZ + abi::URING_OP_IN_SZ;

/// One ring entry's buffers, at fixed addresses for as long as the kernel has them.
struct Entry {
    /// `fuse_uring_req_header`, 8-byte aligned.
    header: Box<[u64; abi::URING_HEADER_SZ / 8]>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

impl Entry {
    fn new(payload_size: usize) -> Entry {
        let mut header = Box::new([0u64; abi::URING_HEADER_SZ / 8]);
        let mut payload = vec![0u8; payload_size];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: abi::URING_HEADER_SZ,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload_size,
            },
        ]);
        Entry {
            header,
            payload,
            iov,
        }
    }

    fn header(&self) -> &[u8] {
        self.header.as_bytes()
    }

    fn header_mut(&mut self) -> &mut [u8] {
        self.header.as_mut_bytes()
    }
}

/// A `URING_CMD` SQE for `/dev/fuse` carrying `cmd` with `qid` and `commit_id`,
/// pointing at `entry`'s two buffers.
fn command(fd: &OwnedFd, cmd: u32, qid: u16, commit_id: u64, entry: &Entry) -> squeue::Entry128 {
    let req = UringCmdReq {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 6],
    };
    let mut area = [0u8; 80];
    area[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
    let sqe = opcode::UringCmd80::new(types::Fd(fd.as_raw_fd()), cmd)
        .cmd(area)
        .addr(Some(entry.iov.as_ptr() as u64))
        .build();
    with_len(sqe, 2)
}

/// Sets the SQE's `len` (the number of iovecs at `addr`), which the `io-uring` crate's
/// `UringCmd80` does not expose; FUSE requires 2.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // `len` of `struct io_uring_sqe`, after opcode, flags, ioprio, fd, off and addr.
    const LEN_OFFSET: usize = 24;
    // SAFETY: Entry128 is `repr(C)`: a 64-byte io_uring_sqe and 64 more bytes, all
    // plain integers, so any 128 bytes are a valid value and the sizes match (checked
    // by transmute at compile time).
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[LEN_OFFSET..LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute(raw) }
}

/// The CPUs that may hold a queue: the kernel makes one queue per possible CPU and
/// uses the rings only once every queue has an entry registered.
pub(crate) fn queues() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    // "0-1", "0", "0-3,5": the highest number + 1.
    s.trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .map(|m| m + 1)
        .ok_or_else(|| io::Error::other(format!("unreadable possible CPUs {s:?}")))
}

/// Pins the calling thread to `cpu` when the process may run there (else leaves it).
fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET and sched_[gs]etaffinity get valid
    // pointers to it.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0
            || cpu >= libc::CPU_SETSIZE as usize
            || !libc::CPU_ISSET(cpu, &allowed)
        {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A queue's ring: 128-byte SQEs, one thread submitting, the kernel's work for it done
/// when that thread waits.
fn new_ring() -> io::Result<Ring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(2 * DEPTH as u32)
}

/// Whether this process can make the rings the queues need (io_uring may be off:
/// `kernel.io_uring_disabled`, seccomp, an old kernel). Checked before INIT asks for
/// io_uring: once it is agreed, the kernel holds every request until the rings are up.
pub(crate) fn probe() -> io::Result<()> {
    new_ring().map(drop)
}

/// How a queue's service ended.
pub(crate) enum Ended {
    /// The connection ended after the queue served it.
    Served,
    /// The queue never got its entries registered (no io_uring here, a refused
    /// registration): the kernel holds every request until the rings are up, so the
    /// mount must end.
    NotStarted(io::Error),
}

/// Serves queue `qid` until the connection ends: registers [`DEPTH`] entries with
/// payload buffers of `payload_size` bytes, then answers each request the kernel puts
/// in one and commits the reply while fetching the next.
pub(crate) fn serve_queue(
    fd: Arc<OwnedFd>,
    fuse: Arc<CairnFuse>,
    qid: u16,
    payload_size: usize,
) -> io::Result<Ended> {
    pin(qid as usize);
    // Declared before the ring, so dropped after it: the kernel may write into an
    // entry's buffers for as long as the ring is open.
    let mut entries: Vec<Entry> = (0..DEPTH).map(|_| Entry::new(payload_size)).collect();
    let mut ring = match new_ring() {
        Ok(r) => r,
        Err(e) => return Ok(Ended::NotStarted(e)),
    };
    for (i, e) in entries.iter().enumerate() {
        let sqe = command(&fd, abi::URING_CMD_REGISTER, qid, 0, e).user_data(i as u64);
        // SAFETY: the entry's buffers and iovecs live in `entries` until this function
        // returns, after the ring (declared after them, so dropped first) is gone.
        unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
    }
    let mut invals: Vec<u64> = Vec::new();
    // Whether any entry has carried a request: until then an error completion means the
    // registration was refused.
    let mut served = false;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if !served => return Ok(Ended::NotStarted(e)),
            Err(e) => return Err(e),
        }
        for ino in invals.drain(..) {
            notify(&fd, Some(ino));
        }
        let done: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (i, res) in done {
            if res < 0 {
                return match -res {
                    // The connection is going away (unmounted, aborted).
                    libc::ENOTCONN | libc::ECANCELED | libc::ENODEV | libc::ECONNABORTED => {
                        Ok(Ended::Served)
                    }
                    e if !served => Ok(Ended::NotStarted(io::Error::from_raw_os_error(e))),
                    e => Err(io::Error::from_raw_os_error(e)),
                };
            }
            served = true;
            let Some(e) = entries.get_mut(i) else {
                return Err(io::Error::other(format!(
                    "completion for unknown entry {i}"
                )));
            };
            let (commit_id, inval) = serve_entry(&fuse, e)?;
            let sqe = command(&fd, abi::URING_CMD_COMMIT_AND_FETCH, qid, commit_id, e)
                .user_data(i as u64);
            // SAFETY: as for the registration above.
            unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
            invals.extend(inval);
        }
    }
}

/// Serves the request in entry `e` and writes its reply there: the commit id to send
/// back, and the inode whose cached attributes the kernel must then drop, if any.
fn serve_entry(fuse: &CairnFuse, e: &mut Entry) -> io::Result<(u64, Option<u64>)> {
    let bad = || io::Error::other("a ring entry's header buffer did not decode");
    let hdr = e.header();
    let (ent, _) = UringEntInOut::read_from_prefix(&hdr[ENT_IN_OUT..]).map_err(|_| bad())?;
    let (h, _) = InHeader::read_from_prefix(hdr).map_err(|_| bad())?;
    let size = (ent.payload_sz as usize).min(e.payload.len());
    let fixed = &hdr[abi::URING_IN_OUT_SZ..ENT_IN_OUT];
    crate::stats::count_via(true);
    let answer = match decode(&h, Body::split(fixed, &e.payload[..size])) {
        Ok(op) => fuse.handle(&h, op),
        Err(err) => Answer::reply(Err(err)),
    };
    // The kernel sends FORGET and INTERRUPT through /dev/fuse only; a request without
    // a reply still needs one here to free the entry.
    let mut r: Reply = answer.reply.unwrap_or(Err(libc::ENOSYS));
    if matches!(&r, Ok(b) if b.len() > e.payload.len()) {
        log::error!(
            "a reply of opcode {} is larger than the ring's payload",
            h.opcode
        );
        r = Err(libc::EIO);
    }
    let len = r.as_ref().map_or(0, |b| b.len());
    if let Ok(b) = &r {
        e.payload[..len].copy_from_slice(b);
    }
    let out: OutHeader = reply::header(h.unique, &r);
    let hdr = e.header_mut();
    hdr[..abi::URING_IN_OUT_SZ].fill(0);
    hdr[..std::mem::size_of::<OutHeader>()].copy_from_slice(out.as_bytes());
    let back = UringEntInOut {
        flags: 0,
        commit_id: ent.commit_id,
        payload_sz: len as u32,
        padding: 0,
        reserved: 0,
    };
    hdr[ENT_IN_OUT..].copy_from_slice(back.as_bytes());
    Ok((ent.commit_id, answer.inval))
}
