//! The ledger of done requests: a link, unlink, rmdir, rename, create, mkdir, write or
//! attribute change sent again with its token — its reply lost — is answered as done,
//! not done twice and not refused (`ENOENT`, `EEXIST`); on one server and through an
//! intent across servers, after a restart, and by a new leader after its group's
//! leader died. A write or truncate sent again after another client's later write
//! leaves that write; a create sent again after others removed and made the name again
//! is answered with what it made. Without a token (or with another one) the request is
//! judged anew.

mod common;

use std::net::SocketAddr;

use cairn_cluster::proto::meta_client::MetaClient;
use cairn_cluster::{proto, ClusterConfig};
use cairn_fs::{Cred, FileSystem, ROOT};
use tonic::transport::Channel;

use common::groups::Groups;
use common::{dir_name_on, endpoint, Cluster};

/// Raw requests to one server, as root.
struct Raw {
    rt: tokio::runtime::Runtime,
    m: MetaClient<Channel>,
    cluster_id: u64,
}

impl Raw {
    fn to(cfg: &ClusterConfig, addr: SocketAddr) -> Raw {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ch = rt
            .block_on(endpoint(cfg, addr, Some("client-admin")).connect())
            .unwrap();
        Raw {
            rt,
            m: MetaClient::new(ch),
            cluster_id: cfg.cluster_id(),
        }
    }

    fn h(&self) -> Option<proto::Header> {
        Some(proto::Header {
            cluster_id: self.cluster_id,
            cred: Some(proto::Cred {
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            }),
            no_checks: false,
            client: 0,
        })
    }

    /// The errno of an unlink (or rmdir) of `name` in `dir` with `token`.
    fn remove(&mut self, dir: u64, name: &str, rmdir: bool, token: u64) -> i32 {
        let req = proto::RemoveReq {
            h: self.h(),
            dir,
            name: name.into(),
            rmdir,
            token,
        };
        let r = self.rt.block_on(self.m.remove(req)).unwrap();
        errno(r.into_inner().status)
    }

    fn rename(&mut self, dir: u64, name: &str, new_dir: u64, new_name: &str, token: u64) -> i32 {
        let req = proto::RenameReq {
            h: self.h(),
            dir,
            name: name.into(),
            new_dir,
            new_name: new_name.into(),
            flags: 0,
            token,
        };
        let r = self.rt.block_on(self.m.rename(req)).unwrap();
        errno(r.into_inner().status)
    }

    /// The errno of a write and the count it answered.
    fn write(&mut self, ino: u64, data: &[u8], token: u64) -> (i32, u64) {
        let req = proto::WriteReq {
            h: self.h(),
            ino,
            offset: 0,
            data: data.to_vec(),
            token,
        };
        let r = self.rt.block_on(self.m.write(req)).unwrap().into_inner();
        (errno(r.status), r.written)
    }

    /// The errno of a truncate to `size` and the size it answered.
    fn truncate(&mut self, ino: u64, size: u64, token: u64) -> (i32, u64) {
        let req = proto::SetAttrReq {
            h: self.h(),
            ino,
            size: Some(size),
            token,
            ..Default::default()
        };
        let r = self.rt.block_on(self.m.set_attr(req)).unwrap().into_inner();
        (errno(r.status), r.attr.map_or(0, |a| a.size))
    }

    /// The errno of a create (`mode` with its type; a directory is a mkdir) and the
    /// inode it answered.
    fn make(&mut self, dir: u64, name: &str, mode: u32, token: u64) -> (i32, u64) {
        let req = proto::MakeReq {
            h: self.h(),
            dir,
            name: name.into(),
            mode,
            token,
            ..Default::default()
        };
        let r = self.rt.block_on(self.m.make(req)).unwrap().into_inner();
        (errno(r.status), r.ino)
    }

    /// The errno of a link and the inode it answered.
    fn link(&mut self, ino: u64, dir: u64, name: &str, token: u64) -> (i32, u64) {
        let req = proto::LinkReq {
            h: self.h(),
            ino,
            dir,
            name: name.into(),
            token,
        };
        let r = self.rt.block_on(self.m.link(req)).unwrap().into_inner();
        (errno(r.status), r.ino)
    }
}

fn errno(s: Option<proto::Status>) -> i32 {
    s.map_or(0, |s| {
        assert!(!s.retry, "busy: {s:?}");
        s.errno as i32
    })
}

const R: Cred = Cred::ROOT;

#[test]
fn a_request_sent_again_is_answered_as_done_not_done_twice() {
    let mut c = Cluster::start(2, 100_000);
    let fs = c.client();
    // Directory `d` lives on server 0 (the root's partition is there), `far` on 1.
    let far_name = dir_name_on(ROOT, "far", 1, 2);
    let far = fs.mkdir(&R, ROOT, &far_name, 0o755).unwrap().ino;
    for n in ["a", "b", "x", "y"] {
        fs.create(&R, ROOT, n.as_bytes(), 0o644).unwrap();
    }
    let linked = fs.create(&R, ROOT, b"to-link", 0o644).unwrap().ino;
    fs.mkdir(&R, ROOT, b"sub", 0o755).unwrap();
    let s0 = c.cfg.servers()[0].addr;
    let mut raw = Raw::to(&c.cfg, s0);

    // Unlink: the copy with the same token is answered as done; another token (or
    // none) is a new request, refused.
    assert_eq!(raw.remove(ROOT, "a", false, 11), 0);
    assert_eq!(raw.remove(ROOT, "a", false, 11), 0);
    assert_eq!(raw.remove(ROOT, "a", false, 12), libc::ENOENT);
    assert_eq!(raw.remove(ROOT, "a", false, 0), libc::ENOENT);
    // Rename on one server, and across servers (an intent).
    assert_eq!(raw.rename(ROOT, "b", ROOT, "b2", 21), 0);
    assert_eq!(raw.rename(ROOT, "b", ROOT, "b2", 21), 0);
    assert_eq!(raw.rename(ROOT, "b", ROOT, "b2", 22), libc::ENOENT);
    assert_eq!(raw.rename(ROOT, "x", far, "x2", 23), 0);
    assert_eq!(raw.rename(ROOT, "x", far, "x2", 23), 0);
    assert_eq!(raw.rename(ROOT, "x", far, "x2", 24), libc::ENOENT);
    // Link: the copy answers the inode linked; another is EEXIST.
    assert_eq!(raw.link(linked, ROOT, "l1", 31), (0, linked));
    assert_eq!(raw.link(linked, ROOT, "l1", 31), (0, linked));
    assert_eq!(raw.link(linked, ROOT, "l1", 32).0, libc::EEXIST);
    // Rmdir (always an intent).
    assert_eq!(raw.remove(ROOT, "sub", true, 41), 0);
    assert_eq!(raw.remove(ROOT, "sub", true, 41), 0);
    assert_eq!(raw.remove(ROOT, "sub", true, 42), libc::ENOENT);
    // Nothing was done twice: the link count and the names are as after one of each.
    assert_eq!(fs.getattr(linked).unwrap().nlink, 2);
    let names = |d| {
        let mut v: Vec<Vec<u8>> = fs
            .readdir(&R, d, None, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| e.name.to_vec())
            .filter(|n| n != b"." && n != b"..")
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(far), [b"x2".to_vec()]);
    let want: Vec<Vec<u8>> = ["b2", "far", "l1", "to-link", "y"]
        .iter()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    let mut got = names(ROOT);
    got.retain(|n| !n.starts_with(b"far"));
    let mut want = want;
    want.retain(|n| !n.starts_with(b"far"));
    assert_eq!(got, want);

    // The ledger is rows: a restarted server still knows.
    drop(raw);
    c.kill(0);
    c.restart(0, None);
    let mut raw = Raw::to(&c.cfg, s0);
    assert_eq!(raw.remove(ROOT, "a", false, 11), 0);
    assert_eq!(raw.rename(ROOT, "x", far, "x2", 23), 0);
    assert_eq!(raw.remove(ROOT, "y", false, 51), 0);
    assert_eq!(raw.remove(ROOT, "y", false, 52), libc::ENOENT);
    drop(raw);
    c.check();
}

#[test]
fn a_new_leader_answers_what_the_dead_leader_did() {
    let mut g = Groups::start(1, 3);
    let fs = g.client();
    for n in ["a", "b"] {
        fs.create(&R, ROOT, n.as_bytes(), 0o644).unwrap();
    }
    let w = fs.create(&R, ROOT, b"w", 0o644).unwrap().ino;
    let l = g.leader(0);
    let mut raw = Raw::to(&g.cfg, g.addrs[0][l]);
    assert_eq!(raw.remove(ROOT, "a", false, 61), 0);
    assert_eq!(raw.rename(ROOT, "b", ROOT, "b2", 62), 0);
    assert_eq!(raw.write(w, b"first", 64), (0, 5));
    let (e, made) = raw.make(ROOT, "c", libc::S_IFREG | 0o644, 65);
    assert_eq!(e, 0);
    drop(raw);
    // The leader dies after answering (as if the answer was lost on the way): the
    // copies reach the next leader.
    g.servers[0][l].take().unwrap().kill();
    let l2 = g.leader(0);
    assert_ne!(l, l2);
    let mut raw = Raw::to(&g.cfg, g.addrs[0][l2]);
    assert_eq!(raw.remove(ROOT, "a", false, 61), 0);
    assert_eq!(raw.rename(ROOT, "b", ROOT, "b2", 62), 0);
    assert_eq!(raw.remove(ROOT, "a", false, 63), libc::ENOENT);
    // Another client's write and unlink come between a request and its copy.
    fs.write(&R, w, 0, b"other").unwrap();
    fs.unlink(&R, ROOT, b"c").unwrap();
    assert_eq!(raw.write(w, b"first", 64), (0, 5));
    assert_eq!(raw.make(ROOT, "c", libc::S_IFREG | 0o644, 65), (0, made));
    assert_eq!(fs.read(&R, w, 0, 16).unwrap(), b"other");
    assert_eq!(common::e(fs.lookup(&R, ROOT, b"c")), libc::ENOENT);
    drop(raw);
    assert_eq!(common::e(fs.lookup(&R, ROOT, b"b")), libc::ENOENT);
    fs.lookup(&R, ROOT, b"b2").unwrap();
}

#[test]
fn a_write_or_truncate_sent_again_leaves_a_later_write() {
    let mut c = Cluster::start(1, 100_000);
    let fs = c.client();
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap().ino;
    let s0 = c.cfg.servers()[0].addr;
    let mut raw = Raw::to(&c.cfg, s0);
    let read = |fs: &cairn_cluster::Client| fs.read(&R, f, 0, 64).unwrap();
    // A write, another client's later write, then the first write's copy: answered
    // as done, not written again over the later one.
    assert_eq!(raw.write(f, b"first", 71), (0, 5));
    fs.write(&R, f, 0, b"other").unwrap();
    assert_eq!(raw.write(f, b"first", 71), (0, 5));
    assert_eq!(read(&fs), b"other");
    // Another token is a new write.
    assert_eq!(raw.write(f, b"third", 72), (0, 5));
    assert_eq!(read(&fs), b"third");
    // A truncate's copy after a later write: answered with the size as it is now.
    assert_eq!(raw.truncate(f, 2, 81), (0, 2));
    fs.write(&R, f, 0, b"longer data").unwrap();
    assert_eq!(raw.truncate(f, 2, 81), (0, 11));
    assert_eq!(read(&fs), b"longer data");
    // The ledger is rows: after a restart the copies are still answered as done.
    drop(raw);
    c.kill(0);
    c.restart(0, None);
    let fs = c.client();
    let mut raw = Raw::to(&c.cfg, s0);
    assert_eq!(raw.write(f, b"first", 71), (0, 5));
    assert_eq!(raw.truncate(f, 2, 81), (0, 11));
    assert_eq!(read(&fs), b"longer data");
    // The file gone, a copy is answered as done (a truncate with the size it made);
    // a new request is refused.
    fs.unlink(&R, ROOT, b"f").unwrap();
    assert_eq!(raw.write(f, b"first", 71), (0, 5));
    assert_eq!(raw.truncate(f, 2, 81), (0, 2));
    assert_eq!(raw.write(f, b"x", 73).0, libc::ENOENT);
    drop(raw);
    c.check();
}

#[test]
fn a_create_sent_again_after_others_changed_the_name_is_answered_as_made() {
    let c = Cluster::start(2, 100_000);
    let fs = c.client();
    let s0 = c.cfg.servers()[0].addr;
    let mut raw = Raw::to(&c.cfg, s0);
    let file = libc::S_IFREG | 0o644;
    // Made; another client removes the name and makes it again; the copy is answered
    // with the inode it made, not EEXIST, and makes nothing.
    let (e, first) = raw.make(ROOT, "n", file, 91);
    assert_eq!(e, 0);
    fs.unlink(&R, ROOT, b"n").unwrap();
    let second = fs.create(&R, ROOT, b"n", 0o644).unwrap().ino;
    assert_eq!(raw.make(ROOT, "n", file, 91), (0, first));
    assert_eq!(fs.lookup(&R, ROOT, b"n").unwrap().ino, second);
    // Another token is a new create: EEXIST.
    assert_eq!(raw.make(ROOT, "n", file, 92).0, libc::EEXIST);
    // Made, then renamed away: the copy makes no second file.
    let (e, moved) = raw.make(ROOT, "m", file, 93);
    assert_eq!(e, 0);
    fs.rename(&R, ROOT, b"m", ROOT, b"m2", 0).unwrap();
    assert_eq!(raw.make(ROOT, "m", file, 93), (0, moved));
    assert_eq!(common::e(fs.lookup(&R, ROOT, b"m")), libc::ENOENT);
    assert_eq!(fs.lookup(&R, ROOT, b"m2").unwrap().ino, moved);
    // A symbolic link's and a directory's (an intent; its inode on either server)
    // copies after others removed and made the name again.
    let (e, dir) = raw.make(ROOT, "d", libc::S_IFDIR | 0o755, 94);
    assert_eq!(e, 0);
    fs.rmdir(&R, ROOT, b"d").unwrap();
    let dir2 = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    assert_eq!(raw.make(ROOT, "d", libc::S_IFDIR | 0o755, 94), (0, dir));
    assert_eq!(fs.lookup(&R, ROOT, b"d").unwrap().ino, dir2);
    assert_eq!(
        raw.make(ROOT, "d", libc::S_IFDIR | 0o755, 95).0,
        libc::EEXIST
    );
    drop(raw);
    c.check();
}
