//! Every RPC of the client-facing service (`Meta`), sent through raw gRPC (not the
//! client library) as a certificate that allows uids 1000-1999 only, against root's
//! `0600` file (with `trusted.`, `user.` and `security.` attributes), a `0700`
//! directory, a `0000` directory holding a symbolic link: each is refused with the
//! errno the table gives, or allowed where the table says why, and nothing the server
//! stores changes (every row dumped before and after). The same requests from the
//! admin certificate as root succeed. An RPC of cluster.proto's `service Meta`
//! without a row here fails the test.
//!
//! Also: every RPC of the server-to-server service refuses a client certificate; a
//! server's certificate may not speak for another server; a restricted client may not
//! act as group 0, chgrp to a group it does not hold, or keep a setgid bit on one.

mod common;

use std::collections::BTreeSet;

use cairn_cluster::proto;
use cairn_cluster::proto::meta_client::MetaClient;
use cairn_cluster::proto::peer_client::PeerClient;
use cairn_fs::{Cred, FileSystem, SetAttr, ROOT};
use common::{endpoint, Cluster};
use tonic::transport::Channel;

const R: Cred = Cred::ROOT;

/// The RPCs of `service Meta` in cluster.proto.
fn meta_rpcs() -> BTreeSet<String> {
    let proto = include_str!("../proto/cluster.proto");
    let body = proto
        .split("service Meta {")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .expect("service Meta in cluster.proto");
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim().to_string())
        .collect()
}

/// What the test made, as root.
struct Objs {
    /// `/secret`: root's 0600 file, with data and three extended attributes.
    secret: u64,
    /// `/private`: root's 0700 directory, holding `inside`, `r1`, `r2`.
    private: u64,
    inside: u64,
    /// `/locked`: a 0000 directory holding the symbolic link `link`.
    locked: u64,
    link: u64,
}

/// What a row expects of the restricted caller.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// The reply carries this errno.
    Errno(i32),
    /// The call fails with this gRPC code.
    Code(tonic::Code),
    /// Served, for the reason given (nothing of the file or directory's contents
    /// leaves the server, or nothing changes).
    Allowed(&'static str),
}

/// The table: each RPC, what the restricted caller gets.
fn table() -> Vec<(&'static str, Want)> {
    use Want::{Allowed, Code, Errno};
    vec![
        ("Lookup", Errno(libc::EACCES)),
        (
            "GetAttr",
            Allowed("attributes by inode number, as NFS's GETATTR"),
        ),
        ("SetAttr", Errno(libc::EPERM)),
        ("Make", Errno(libc::EACCES)),
        ("MakeBatch", Errno(libc::EACCES)),
        ("MakeStream", Errno(libc::EACCES)),
        ("Link", Errno(libc::EACCES)),
        ("Remove", Errno(libc::EACCES)),
        ("Rename", Errno(libc::EACCES)),
        ("OpenDir", Errno(libc::EACCES)),
        ("ReadDir", Errno(libc::EACCES)),
        (
            "ParentOf",
            Allowed("a directory's parent inode number: no name, no data"),
        ),
        (
            "Readlink",
            Allowed("a link's target, as Linux's readlink and NFS's READLINK: no bits of its own"),
        ),
        ("Open", Errno(libc::EACCES)),
        (
            "Release",
            Allowed("ends only an open of the caller's own uid: none here"),
        ),
        ("Read", Errno(libc::EACCES)),
        ("Write", Errno(libc::EACCES)),
        (
            "Fsync",
            Allowed("syncs what the server has; changes nothing"),
        ),
        ("GetXattr", Errno(libc::EACCES)),
        ("SetXattr", Errno(libc::EACCES)),
        (
            "ListXattr",
            Allowed("names only, without root's trusted.* ones"),
        ),
        ("RemoveXattr", Errno(libc::EACCES)),
        ("StatFs", Allowed("space figures of the server's disk")),
        (
            "ServerStatus",
            Allowed("the in-memory counts only, marked partial"),
        ),
        ("Dump", Code(tonic::Code::PermissionDenied)),
        ("ChangeReplicas", Code(tonic::Code::PermissionDenied)),
        (
            "Leases",
            Allowed("a lease session of the caller's own: it is leased only what its requests are answered"),
        ),
    ]
}

fn header(c: &Cluster, cred: &Cred) -> Option<proto::Header> {
    Some(proto::Header {
        cluster_id: c.cfg.cluster_id(),
        cred: Some(proto::Cred {
            uid: cred.uid,
            gid: cred.gid,
            groups: cred.groups.as_slice().to_vec(),
        }),
        no_checks: true,
        client: 0,
    })
}

/// The errno of a reply's status (0: none).
fn errno(s: Option<proto::Status>) -> i32 {
    s.map_or(0, |s| s.errno as i32)
}

/// Sends `rpc` (its restricted-caller form) as `h`: the errno it answers with, or the
/// gRPC code it fails with; `None` for an RPC without a row.
// One arm per RPC of the table, best read together.
#[allow(clippy::too_many_lines)]
async fn call(
    rpc: &str,
    m: &mut MetaClient<Channel>,
    h: Option<proto::Header>,
    o: &Objs,
    tag: &str,
) -> Option<Result<i32, tonic::Code>> {
    let name = |s: &str| format!("{s}-{tag}").into_bytes();
    let file = libc::S_IFREG | 0o644;
    let make = proto::MakeReq {
        h: h.clone(),
        dir: o.private,
        name: name("made"),
        mode: file,
        ..Default::default()
    };
    let xattr = |n: &str| proto::XattrReq {
        h: h.clone(),
        ino: o.secret,
        name: n.as_bytes().to_vec(),
        value: b"v".to_vec(),
        flags: 0,
    };
    let ino = |ino| proto::InoReq { h: h.clone(), ino };
    let r = match rpc {
        "Lookup" => m
            .lookup(proto::LookupReq {
                h: h.clone(),
                dir: o.private,
                name: b"inside".to_vec(),
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "GetAttr" => m
            .get_attr(ino(o.secret))
            .await
            .map(|r| errno(r.into_inner().status)),
        "SetAttr" => m
            .set_attr(proto::SetAttrReq {
                h: h.clone(),
                ino: o.secret,
                mode: Some(0o600),
                ..Default::default()
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "Make" => m.make(make).await.map(|r| errno(r.into_inner().status)),
        "MakeBatch" => m
            .make_batch(proto::MakeBatchReq {
                items: vec![proto::MakeReq {
                    name: name("batched"),
                    ..make
                }],
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                errno(r.status).max(r.items.into_iter().map(|i| errno(i.status)).sum())
            }),
        "MakeStream" => {
            let one = proto::StreamedMake {
                id: 1,
                req: Some(proto::MakeReq {
                    name: name("streamed"),
                    ..make
                }),
            };
            match m.make_stream(tokio_stream::iter(vec![one])).await {
                Ok(r) => match r.into_inner().message().await {
                    Ok(Some(e)) => Ok(errno(e.rep.and_then(|r| r.status))),
                    Ok(None) => Err(tonic::Status::unknown("the stream ended without a reply")),
                    Err(s) => Err(s),
                },
                Err(s) => Err(s),
            }
        }
        "Link" => m
            .link(proto::LinkReq {
                h: h.clone(),
                ino: o.secret,
                dir: o.private,
                name: name("linked"),
                token: 0,
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "Remove" => m
            .remove(proto::RemoveReq {
                h: h.clone(),
                dir: o.private,
                name: b"r1".to_vec(),
                rmdir: false,
                token: 0,
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "Rename" => m
            .rename(proto::RenameReq {
                h: h.clone(),
                dir: o.private,
                name: b"r2".to_vec(),
                new_dir: ROOT,
                new_name: name("stolen"),
                flags: 0,
                token: 0,
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "OpenDir" => m
            .open_dir(ino(o.private))
            .await
            .map(|r| errno(r.into_inner().status)),
        "ReadDir" => m
            .read_dir(proto::ReadDirReq {
                h: h.clone(),
                dir: o.private,
                limit: 100,
                from_start: true,
                ..Default::default()
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "ParentOf" => m
            .parent_of(ino(o.private))
            .await
            .map(|r| errno(r.into_inner().status)),
        "Readlink" => m
            .readlink(ino(o.link))
            .await
            .map(|r| errno(r.into_inner().status)),
        "Open" => m
            .open(proto::OpenReq {
                h: h.clone(),
                ino: o.secret,
                flags: libc::O_RDONLY,
                created: false,
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "Release" => m
            .release(ino(o.secret))
            .await
            .map(|r| errno(r.into_inner().status)),
        "Read" => m
            .read(proto::ReadReq {
                h: h.clone(),
                ino: o.secret,
                offset: 0,
                size: 100,
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "Write" => m
            .write(proto::WriteReq {
                h: h.clone(),
                ino: o.secret,
                offset: 0,
                data: b"owned".to_vec(),
                token: 0,
            })
            .await
            .map(|r| errno(r.into_inner().status)),
        "Fsync" => m
            .fsync(ino(o.secret))
            .await
            .map(|r| errno(r.into_inner().status)),
        "GetXattr" => m
            .get_xattr(xattr("user.k"))
            .await
            .map(|r| errno(r.into_inner().status)),
        "SetXattr" => m
            .set_xattr(xattr("user.new"))
            .await
            .map(|r| errno(r.into_inner().status)),
        "ListXattr" => m
            .list_xattr(ino(o.secret))
            .await
            .map(|r| errno(r.into_inner().status)),
        "RemoveXattr" => m
            .remove_xattr(xattr("user.k"))
            .await
            .map(|r| errno(r.into_inner().status)),
        "StatFs" => m
            .stat_fs(proto::StatFsReq { h: h.clone() })
            .await
            .map(|r| errno(r.into_inner().status)),
        "ServerStatus" => m
            .server_status(proto::ServerStatusReq {
                h: h.clone(),
                top: 5,
                digest: false,
            })
            .await
            .map(|_| 0),
        "Dump" => m
            .dump(proto::DumpReq {
                h: h.clone(),
                after: Vec::new(),
                limit: 10,
            })
            .await
            .map(|_| 0),
        "ChangeReplicas" => m
            .change_replicas(proto::ChangeReplicasReq {
                h: h.clone(),
                group: 0,
                change: proto::ReplicaChange::Remove as i32,
                id: 1,
                addr: String::new(),
                timeout_ms: 1000,
            })
            .await
            .map(|_| 0),
        "Leases" => {
            let mut h = h.clone();
            if let Some(h) = h.as_mut() {
                h.client = 77;
            }
            let first = proto::LeaseUp {
                h,
                renew: 1,
                revoked: 0,
            };
            match m.leases(tokio_stream::iter(vec![first])).await {
                // Served: the renewal is granted.
                Ok(r) => {
                    let mut s = r.into_inner();
                    let got = tokio::time::timeout(std::time::Duration::from_secs(5), s.message())
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten();
                    Ok(if got.is_some_and(|d| d.renewed == 1) {
                        0
                    } else {
                        -1
                    })
                }
                Err(e) => Err(e),
            }
        }
        _ => return None,
    };
    Some(r.map_err(|s| s.code()))
}

/// Every row of every server, decoded, as `cluster check` reads them.
async fn dump_all(c: &Cluster) -> Vec<String> {
    let mut out = Vec::new();
    for s in c.cfg.servers() {
        let ch = endpoint(&c.cfg, s.addr, Some("client-admin"))
            .connect()
            .await
            .unwrap();
        let mut m = MetaClient::new(ch);
        let mut after = Vec::new();
        for _ in 0..1000 {
            let r = m
                .dump(proto::DumpReq {
                    h: header(c, &R),
                    after: after.clone(),
                    limit: 1000,
                })
                .await
                .unwrap()
                .into_inner();
            out.push(format!("{:?}", (&r.partitions, &r.entries, &r.inodes)));
            out.push(format!("{:?}", (&r.links, &r.subdirs, &r.intents)));
            if r.next.is_empty() {
                break;
            }
            after = r.next;
        }
    }
    out
}

fn setup(c: &Cluster) -> Objs {
    let fs = c.client();
    let secret = fs.create(&R, ROOT, b"secret", 0o600).unwrap().ino;
    fs.write(&R, secret, 0, b"root only").unwrap();
    for (n, v) in [("trusted.k", "t"), ("user.k", "u"), ("security.k", "s")] {
        fs.setxattr(&R, secret, n.as_bytes(), v.as_bytes(), 0)
            .unwrap();
    }
    let private = fs.mkdir(&R, ROOT, b"private", 0o700).unwrap().ino;
    let inside = fs.create(&R, private, b"inside", 0o644).unwrap().ino;
    fs.create(&R, private, b"r1", 0o644).unwrap();
    fs.create(&R, private, b"r2", 0o644).unwrap();
    let locked = fs.mkdir(&R, ROOT, b"locked", 0o755).unwrap().ino;
    let link = fs.symlink(&R, locked, b"link", b"/target").unwrap().ino;
    let none = SetAttr {
        mode: Some(0),
        ..Default::default()
    };
    fs.setattr(&R, locked, &none).unwrap();
    fs.fsync(ROOT).unwrap();
    Objs {
        secret,
        private,
        inside,
        locked,
        link,
    }
}

#[test]
fn every_meta_rpc_is_checked_for_a_restricted_certificate() {
    let c = Cluster::start(1, 8192);
    let o = setup(&c);
    let rows = table();
    let listed: BTreeSet<String> = rows.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        listed,
        meta_rpcs(),
        "every RPC of service Meta needs a row in this table (and only those)"
    );
    let s0 = c.cfg.servers()[0].addr;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let before = dump_all(&c).await;
        let ch = endpoint(&c.cfg, s0, Some("client-u1000"))
            .connect()
            .await
            .unwrap();
        let mut user = MetaClient::new(ch);
        // As uid 1000, and as root (squashed to nobody by this certificate).
        for cred in [Cred::new(1000, 1000), R] {
            for (rpc, want) in &rows {
                let got = call(rpc, &mut user, header(&c, &cred), &o, "user")
                    .await
                    .unwrap_or_else(|| panic!("{rpc}: no request in call()"));
                let ok = match (want, got) {
                    (Want::Errno(e), Ok(g)) => *e == g,
                    (Want::Code(k), Err(g)) => *k == g,
                    (Want::Allowed(_), Ok(0)) => true,
                    _ => false,
                };
                assert!(ok, "{rpc} as uid {}: want {want:?}, got {got:?}", cred.uid);
            }
        }
        // What the allowed rows answer leaks nothing: no trusted.* name, no counts
        // beyond memory's.
        let names = user
            .list_xattr(proto::InoReq {
                h: header(&c, &Cred::new(1000, 1000)),
                ino: o.secret,
            })
            .await
            .unwrap()
            .into_inner()
            .names;
        assert!(
            !names.iter().any(|n| n.starts_with(b"trusted.")),
            "{names:?}"
        );
        let st = user
            .server_status(proto::ServerStatusReq {
                h: header(&c, &Cred::new(1000, 1000)),
                top: 5,
                digest: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            st.partial && st.inodes == 0 && st.largest.is_empty(),
            "{st:?}"
        );
        // A trusted.* attribute is as absent to a non-root caller.
        let mut t = proto::XattrReq {
            h: header(&c, &Cred::new(1000, 1000)),
            ino: o.secret,
            name: b"trusted.k".to_vec(),
            ..Default::default()
        };
        let r = user.get_xattr(t.clone()).await.unwrap().into_inner();
        assert_eq!(errno(r.status), libc::ENODATA);
        // Nothing changed.
        c.client().fsync(ROOT).unwrap();
        assert_eq!(
            before,
            dump_all(&c).await,
            "a refused request changed a row"
        );
        // The same requests from the admin certificate, as root, are served.
        let ch = endpoint(&c.cfg, s0, Some("client-admin"))
            .connect()
            .await
            .unwrap();
        let mut admin = MetaClient::new(ch);
        for (rpc, _) in &rows {
            let got = call(rpc, &mut admin, header(&c, &R), &o, "owner").await;
            // Past the permission check, a server of one replica has no members to
            // change (tests/membership.rs changes a replicated server's).
            let want = match *rpc {
                "ChangeReplicas" => Some(Err(tonic::Code::InvalidArgument)),
                _ => Some(Ok(0)),
            };
            assert_eq!(got, want, "{rpc} as root through the admin certificate");
        }
        t.h = header(&c, &R);
        let r = admin.get_xattr(t).await.unwrap().into_inner();
        assert_eq!((errno(r.status), r.data), (0, b"t".to_vec()));
        let st = admin
            .server_status(proto::ServerStatusReq {
                h: header(&c, &R),
                top: 5,
                digest: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!st.partial && st.inodes > 5, "{st:?}");
    });
    let fs = c.client();
    assert_eq!(fs.read(&R, o.secret, 0, 100).unwrap(), b"ownedonly");
    assert!(fs.lookup(&R, o.private, b"inside").is_ok());
    let _ = (o.inside, o.locked);
    c.check();
    c.shutdown();
}

#[test]
fn a_client_certificate_reaches_no_server_to_server_call_and_servers_speak_for_themselves() {
    let c = Cluster::start(2, 8192);
    let s0 = c.cfg.servers()[0].addr;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let admin = endpoint(&c.cfg, s0, Some("client-admin"))
            .connect()
            .await
            .unwrap();
        let mut p = PeerClient::new(admin);
        // Every unary call of the service, through the interceptor that refuses
        // client certificates before any handler runs.
        fn refused<T>(r: Result<T, tonic::Status>) {
            let code = r.map(|_| ()).unwrap_err().code();
            assert_eq!(code, tonic::Code::PermissionDenied);
        }
        refused(p.touch_dirs(proto::TouchReq::default()).await);
        refused(p.update_dir_perms(proto::DirPermsReq::default()).await);
        refused(p.forget_memo(proto::IntentRef::default()).await);
        refused(p.outcome(proto::IntentRef::default()).await);
        refused(p.rename_lock(proto::LockReq::default()).await);
        refused(p.make_dir(proto::MakeDirReq::default()).await);
        // Server 1's certificate speaking as server 0: refused; as itself: served.
        let one = endpoint(&c.cfg, s0, Some("server-1"))
            .connect()
            .await
            .unwrap();
        let mut p = PeerClient::new(one);
        let touch = |from: u32| proto::TouchReq {
            h: Some(proto::PeerHeader {
                cluster_id: c.cfg.cluster_id(),
                from,
                ..Default::default()
            }),
            times: Vec::new(),
        };
        let e = p.touch_dirs(touch(0)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        p.touch_dirs(touch(1)).await.unwrap();
    });
    c.check();
    c.shutdown();
}

#[test]
fn a_restricted_certificate_cannot_act_as_a_group_it_is_not_allowed() {
    let c = Cluster::start(2, 8192);
    let admin = c.client();
    let open = admin.mkdir(&R, ROOT, b"open", 0o777).unwrap().ino;
    let wheel = admin.mkdir(&R, ROOT, b"wheel", 0o2777).unwrap();
    assert_eq!(wheel.gid, 0);
    let user = common::client_as(&c, "u1000");
    // Group 0 asked for, as the primary group or a supplementary one: squashed.
    let claim = Cred::new(1000, 0).with_groups(&[0, 1000]);
    let f = user.create(&claim, open, b"f", 0o664).unwrap();
    assert_eq!((f.uid, f.gid), (1000, 65534));
    // chgrp to group 0, which the caller claims but the certificate does not allow.
    let to0 = SetAttr {
        gid: Some(0),
        ..Default::default()
    };
    assert_eq!(
        user.setattr(&claim, f.ino, &to0).err(),
        Some(cairn_fs::Errno(libc::EPERM))
    );
    // A file in a setgid directory of group 0 takes that group (the directory's
    // rule), but its owner cannot set the setgid bit on it: not a member of group 0.
    let g = user.create(&claim, wheel.ino, b"g", 0o644).unwrap();
    assert_eq!(g.gid, 0);
    let sgid = SetAttr {
        mode: Some(0o2755),
        ..Default::default()
    };
    let a = user.setattr(&claim, g.ino, &sgid).unwrap();
    assert_eq!(a.mode & 0o7777, 0o755, "setgid kept on a group not held");
    // The admin certificate keeps group 0.
    let h = admin.create(&claim, open, b"h", 0o644).unwrap();
    assert_eq!((h.uid, h.gid), (1000, 0));
    c.check();
    c.shutdown();
}
