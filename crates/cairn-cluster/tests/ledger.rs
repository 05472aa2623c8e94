//! The ledger of done requests: a link, unlink, rmdir or rename sent again with its
//! token — its reply lost — is answered as done, not done twice and not refused
//! (`ENOENT`, `EEXIST`); on one server and through an intent across servers, after a
//! restart, and by a new leader after its group's leader died. Without a token (or
//! with another one) the request is judged anew.

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
    let l = g.leader(0);
    let mut raw = Raw::to(&g.cfg, g.addrs[0][l]);
    assert_eq!(raw.remove(ROOT, "a", false, 61), 0);
    assert_eq!(raw.rename(ROOT, "b", ROOT, "b2", 62), 0);
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
    drop(raw);
    assert_eq!(common::e(fs.lookup(&R, ROOT, b"b")), libc::ENOENT);
    fs.lookup(&R, ROOT, b"b2").unwrap();
}
