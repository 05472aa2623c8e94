//! Bad input: malformed and oversized messages, unknown partitions and inodes, names
//! over 255 bytes, a cluster file that disagrees between server and client, a store of
//! another cluster. Each gets a clear error; the server keeps serving and nothing it
//! stores changes.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;

use cairn_cluster::proto;
use cairn_cluster::server::{self, ServerOptions};
use cairn_cluster::{Client, ClientError, ClientOptions, ClusterConfig, ServerError};
use cairn_fs::{Cred, FileSystem, ROOT};
use common::{config_text, free_addrs, Cluster};

const R: Cred = Cred::ROOT;

/// Sends and receives message bytes as they are.
#[derive(Clone, Default)]
struct Raw;
struct RawEnc;
struct RawDec;

impl Encoder for RawEnc {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEnc;
    type Decoder = RawDec;
    fn encoder(&mut self) -> RawEnc {
        RawEnc
    }
    fn decoder(&mut self) -> RawDec {
        RawDec
    }
}

/// One unary call of `method` with `body` as the message bytes.
fn raw_call(
    cfg: &ClusterConfig,
    addr: SocketAddr,
    method: &'static str,
    body: Vec<u8>,
) -> Result<Vec<u8>, tonic::Status> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        // Server-to-server calls as a server (a client's certificate may not make them).
        let who = if method.starts_with("/cairn.cluster.v1.Peer/") {
            "server-1"
        } else {
            "client-admin"
        };
        let ch = common::endpoint(cfg, addr, Some(who))
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        let mut g = tonic::client::Grpc::new(ch).max_encoding_message_size(64 << 20);
        g.ready().await.unwrap();
        g.unary(
            tonic::Request::new(body),
            PathAndQuery::from_static(method),
            Raw,
        )
        .await
        .map(|r| r.into_inner())
    })
}

fn header(c: &Cluster) -> Option<proto::Header> {
    Some(proto::Header {
        cluster_id: c.cfg.cluster_id(),
        cred: Some(proto::Cred {
            uid: 0,
            gid: 0,
            groups: vec![],
        }),
        no_checks: false,
        client: 0,
    })
}

fn status_errno(b: &[u8]) -> u32 {
    // Every reply's field 1 is its Status.
    let e = proto::Empty::decode(b).unwrap();
    e.status.map_or(0, |s| s.errno)
}

fn names(fs: &dyn FileSystem, d: u64) -> Vec<Vec<u8>> {
    let mut v: Vec<_> = fs
        .readdir(&R, d, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

#[test]
#[allow(clippy::too_many_lines)]
fn malformed_oversized_and_unknown() {
    let c = Cluster::start(2, 8192);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    let f = fs.create(&R, d, b"f", 0o644).unwrap().ino;
    fs.write(&R, f, 0, b"kept").unwrap();
    let before = names(&fs, d);
    let s0 = c.cfg.servers()[0].addr;
    let home = c.cfg.servers()[cairn_cluster::giga::home_of(d) as usize].addr;

    // Bytes that are no protobuf message.
    for (m, body) in [
        ("/cairn.cluster.v1.Meta/Lookup", vec![0xff; 17]),
        (
            "/cairn.cluster.v1.Meta/Make",
            vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
        ("/cairn.cluster.v1.Peer/MakeDir", vec![0x12, 0x80]),
        ("/cairn.cluster.v1.Meta/NoSuchMethod", vec![]),
        // Truncated: a well-formed message cut before its last byte.
        ("/cairn.cluster.v1.Meta/Lookup", {
            let mut v = proto::LookupReq {
                h: header(&c),
                dir: ROOT,
                name: b"d".to_vec(),
            }
            .encode_to_vec();
            v.pop();
            v
        }),
    ] {
        let e = raw_call(&c.cfg, s0, m, body).unwrap_err();
        assert_ne!(e.code(), tonic::Code::Ok, "{m}");
    }
    // Well-formed but without a header, or with another cluster's id.
    let req = proto::LookupReq {
        h: None,
        dir: ROOT,
        name: b"d".to_vec(),
    };
    let e = raw_call(
        &c.cfg,
        s0,
        "/cairn.cluster.v1.Meta/Lookup",
        req.encode_to_vec(),
    )
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let mut h = header(&c);
    h.as_mut().unwrap().cluster_id ^= 1;
    let req = proto::MakeReq {
        h,
        dir: ROOT,
        name: b"intruder".to_vec(),
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    };
    let e = raw_call(
        &c.cfg,
        s0,
        "/cairn.cluster.v1.Meta/Make",
        req.encode_to_vec(),
    )
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("cluster file differs"), "{e:?}");
    // A peer call from an unknown server, and one from another cluster.
    let req = proto::DirPermsReq {
        h: Some(proto::PeerHeader {
            cluster_id: c.cfg.cluster_id(),
            from: 7,
            ..Default::default()
        }),
        dir: d,
        perms: None,
    };
    let e = raw_call(
        &c.cfg,
        s0,
        "/cairn.cluster.v1.Peer/UpdateDirPerms",
        req.encode_to_vec(),
    )
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // Oversized: past the 16 MiB message limit.
    let req = proto::WriteReq {
        h: header(&c),
        ino: f,
        offset: 0,
        data: vec![1; 17 << 20],
        token: 0,
    };
    let e = raw_call(
        &c.cfg,
        home,
        "/cairn.cluster.v1.Meta/Write",
        req.encode_to_vec(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange | tonic::Code::Internal
        ),
        "{e:?}"
    );
    // Names over 255 bytes, empty names, names with '/'.
    let long = vec![b'x'; 300];
    for (name, want) in [
        (long.clone(), libc::ENAMETOOLONG),
        (vec![], libc::ENOENT),
        (b"a/b".to_vec(), libc::EINVAL),
    ] {
        let req = proto::MakeReq {
            h: header(&c),
            dir: d,
            name: name.clone(),
            mode: libc::S_IFREG | 0o644,
            ..Default::default()
        };
        let rep = raw_call(
            &c.cfg,
            home,
            "/cairn.cluster.v1.Meta/Make",
            req.encode_to_vec(),
        )
        .unwrap();
        assert_eq!(status_errno(&rep), want as u32, "{name:?}");
    }
    assert_eq!(
        fs.create(&R, d, &long, 0o644).unwrap_err().0,
        libc::ENAMETOOLONG
    );
    assert_eq!(fs.lookup(&R, d, &long).unwrap_err().0, libc::ENAMETOOLONG);
    assert_eq!(
        fs.rename(&R, d, b"f", d, &long, 0).unwrap_err().0,
        libc::ENAMETOOLONG
    );
    assert_eq!(fs.link(&R, f, d, &long).unwrap_err().0, libc::ENAMETOOLONG);
    assert_eq!(
        fs.mkdir(&R, d, &long, 0o755).unwrap_err().0,
        libc::ENAMETOOLONG
    );
    // Unknown partitions, directories and inodes.
    let req = proto::ReadDirReq {
        h: header(&c),
        dir: d,
        partition: 12_345_678,
        after_rev: u64::MAX - 5,
        after_name: vec![b'q'; 1000],
        limit: 10,
        from_start: false,
        plus: true,
    };
    let rep = raw_call(
        &c.cfg,
        home,
        "/cairn.cluster.v1.Meta/ReadDir",
        req.encode_to_vec(),
    )
    .unwrap();
    assert_eq!(status_errno(&rep), libc::EINVAL as u32);
    let req = proto::ReadDirReq {
        h: header(&c),
        dir: 0xdead_beef,
        partition: 3,
        limit: 10,
        ..Default::default()
    };
    let rep = raw_call(
        &c.cfg,
        s0,
        "/cairn.cluster.v1.Meta/ReadDir",
        req.encode_to_vec(),
    )
    .unwrap();
    assert_eq!(status_errno(&rep), libc::ENOENT as u32);
    let unknown_home = (999u64 << 48) | 1;
    assert_eq!(fs.getattr(unknown_home).unwrap_err().0, libc::ENOENT);
    assert_eq!(
        fs.lookup(&R, unknown_home, b"x").unwrap_err().0,
        libc::ENOENT
    );
    assert_eq!(
        fs.readdir(&R, unknown_home, None, 10).unwrap_err().0,
        libc::ENOENT
    );
    assert_eq!(fs.getattr(0).unwrap_err().0, libc::ENOENT);
    // A split transfer that is not one: unknown partition index, names that do not
    // belong, a partition of another server.
    for (index, depth, name) in [
        (5u32, 1u32, b"a".to_vec()),
        (1, 1, vec![b'z'; 300]),
        (0, 0, b"a".to_vec()),
    ] {
        let chunk = proto::PartitionChunk {
            h: Some(proto::PeerHeader {
                cluster_id: c.cfg.cluster_id(),
                from: 0,
                intent: Some(proto::IntentId { server: 0, id: 99 }),
                ..Default::default()
            }),
            dir: d,
            index,
            depth,
            perms: Some(proto::DirPerms::default()),
            entries: vec![proto::DirEntry {
                name,
                ino: 5,
                kind: libc::S_IFREG,
                token: 0,
                attr: None,
            }],
            first: true,
            last: true,
        };
        let mut body = Vec::new();
        // A client-streaming call with one message: the same framing as unary.
        body.extend_from_slice(&chunk.encode_to_vec());
        let rep = raw_call(&c.cfg, s0, "/cairn.cluster.v1.Peer/AcceptPartition", body);
        match rep {
            Ok(b) => assert_eq!(status_errno(&b), libc::EINVAL as u32, "index {index}"),
            Err(e) => assert_ne!(e.code(), tonic::Code::Ok),
        }
    }
    let req = proto::PartitionRef {
        h: Some(proto::PeerHeader {
            cluster_id: c.cfg.cluster_id(),
            from: 1,
            intent: Some(proto::IntentId { server: 1, id: 1 }),
            ..Default::default()
        }),
        dir: d,
        index: 77,
    };
    let rep = raw_call(
        &c.cfg,
        s0,
        "/cairn.cluster.v1.Peer/ActivatePartition",
        req.encode_to_vec(),
    )
    .unwrap();
    assert_eq!(status_errno(&rep), libc::ENOENT as u32);

    // The servers keep serving; nothing they store changed.
    assert_eq!(names(&fs, d), before);
    assert_eq!(fs.read(&R, f, 0, 10).unwrap(), b"kept");
    assert_eq!(
        fs.lookup(&R, ROOT, b"intruder").unwrap_err().0,
        libc::ENOENT
    );
    fs.create(&R, d, b"after", 0o644).unwrap();
    c.check();
    c.shutdown();
}

#[test]
fn a_cluster_file_that_disagrees() {
    let c = Cluster::start(2, 8192);
    let fs = c.client();
    fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    // A client whose file lists a third server: the servers refuse it at connect.
    let mut addrs: Vec<SocketAddr> = c.cfg.servers().iter().map(|s| s.addr).collect();
    addrs.extend(free_addrs(1));
    let other = ClusterConfig::parse(&config_text(&addrs)).unwrap();
    match Client::with_config(other.clone(), ClientOptions::default()) {
        Err(ClientError::ClusterMismatch { id, .. }) => assert!(id < 2),
        r => panic!("expected ClusterMismatch, got {r:?}"),
    }
    // The operator tools say so too.
    match cairn_cluster::admin::check(&other, Duration::from_secs(2)) {
        Err(ClientError::ClusterMismatch { .. }) => {}
        r => panic!("expected ClusterMismatch, got {r:?}"),
    }
    let st = cairn_cluster::admin::status(&other, Duration::from_secs(2));
    assert!(
        st.servers[0]
            .error
            .as_deref()
            .unwrap()
            .contains("different cluster file"),
        "{st:?}"
    );
    // A server whose address is not in the file.
    let lone = free_addrs(1)[0];
    let dir = tempfile::tempdir().unwrap();
    match server::start(ServerOptions::new(dir.path(), lone, c.cfg.clone())) {
        Err(ServerError::NotInCluster(a)) => assert_eq!(a, lone),
        r => panic!("expected NotInCluster, got {r:?}"),
    }
    // A store of this cluster opened with another cluster file, or as another server.
    let store = c.dirs[1].path().to_path_buf();
    let mut c = c;
    c.shutdown_one(1);
    let mut o = ServerOptions::new(&store, other.servers()[1].addr, other.clone());
    o.peer_timeout = Duration::from_secs(1);
    match server::start(o) {
        Err(e @ ServerError::WrongStore { .. }) => {
            assert!(e.to_string().contains("another cluster file"), "{e}")
        }
        r => panic!("expected WrongStore, got {r:?}"),
    }
    let swapped = ServerOptions::new(&store, c.cfg.servers()[0].addr, c.cfg.clone());
    c.shutdown_one(0);
    match server::start(swapped) {
        Err(e @ ServerError::WrongStore { .. }) => {
            assert!(e.to_string().contains("server 1"), "{e}")
        }
        r => panic!("expected WrongStore, got {r:?}"),
    }
    // Nothing changed: both restart and serve.
    c.restart(0, None);
    c.restart(1, None);
    let fs = c.client();
    assert!(fs.lookup(&R, ROOT, b"d").unwrap().is_dir());
    c.check();
    c.shutdown();
}

/// A server that is down: operations that need it fail with EIO within the timeout;
/// the others go on; nothing hangs; back up, everything works.
/// A client that keeps a connection open and stops answering (its runtime no longer
/// runs) does not hold a server's shutdown: requests in flight get
/// `SHUTDOWN_GRACE`, then the store closes (it used to wait for HTTP/2 keepalive, 40 s,
/// and forever before keepalive was on).
#[test]
fn shutdown_does_not_wait_for_a_silent_client() {
    let c = Cluster::start(1, 8192);
    let addr = c.cfg.servers()[0].addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ch = rt.block_on(async {
        let ch = common::endpoint(&c.cfg, addr, Some("client-admin"))
            .connect()
            .await
            .unwrap();
        let mut m = proto::meta_client::MetaClient::new(ch.clone());
        m.get_attr(proto::InoReq {
            h: header(&c),
            ino: ROOT,
        })
        .await
        .unwrap();
        ch
    });
    // `rt` is not driven from here on: the connection stays open, silent.
    let t = std::time::Instant::now();
    c.shutdown();
    let took = t.elapsed();
    assert!(
        took < server::SHUTDOWN_GRACE + Duration::from_secs(5),
        "shutdown took {took:?}"
    );
    drop(ch);
    drop(rt);
}

#[test]
fn a_server_down() {
    let mut c = Cluster::start(3, 8192);
    let fs = c.client();
    // One directory per home server.
    let dirs: Vec<u64> = (0..3)
        .map(|s| {
            let name = (0..1000)
                .map(|i| format!("d{i}").into_bytes())
                .find(|n| cairn_cluster::giga::dir_home(ROOT, n, 3) == s)
                .unwrap();
            fs.mkdir(&R, ROOT, &name, 0o755).unwrap().ino
        })
        .collect();
    for &d in &dirs {
        fs.create(&R, d, b"f", 0o644).unwrap();
    }
    c.kill(2);
    let t = Duration::from_millis(800);
    let short = c.client_timeout(t);
    for (i, &d) in dirs.iter().enumerate() {
        let start = std::time::Instant::now();
        let r = short.create(&R, d, b"g", 0o644);
        let took = start.elapsed();
        assert!(took < t + Duration::from_secs(2), "took {took:?}");
        if i == 2 {
            assert_eq!(r.unwrap_err().0, libc::EIO);
            assert_eq!(short.getattr(d).unwrap_err().0, libc::EIO);
            assert_eq!(short.readdir(&R, d, None, 10).unwrap_err().0, libc::EIO);
        } else {
            r.unwrap();
        }
    }
    // An rmdir needs the directory's home; a mkdir whose new home is down fails with
    // EIO and is finished later (as NFS, a failed mkdir may appear afterwards).
    let name = (0..1000)
        .map(|i| format!("late{i}").into_bytes())
        .find(|n| cairn_cluster::giga::dir_home(ROOT, n, 3) == 2)
        .unwrap();
    assert_eq!(
        short.mkdir(&R, ROOT, &name, 0o755).unwrap_err().0,
        libc::EIO
    );
    c.restart(2, None);
    c.settle(Duration::from_secs(30));
    let fs = c.client();
    assert!(fs.lookup(&R, ROOT, &name).unwrap().is_dir());
    fs.create(&R, dirs[2], b"g", 0o644).unwrap();
    c.check();
    c.shutdown();
}

/// A client keeps working across restarts of a server, clean or killed (its
/// connections are reopened).
#[test]
fn clients_survive_restarts() {
    let mut c = Cluster::start(2, 8192);
    let fs = c.client();
    fs.create(&R, ROOT, b"a", 0o644).unwrap();
    for k in 0..3 {
        c.shutdown_one(0);
        c.restart(0, None);
        fs.create(&R, ROOT, format!("b{k}").as_bytes(), 0o644)
            .unwrap();
        c.kill(0);
        c.restart(0, None);
        fs.create(&R, ROOT, format!("c{k}").as_bytes(), 0o644)
            .unwrap();
    }
    assert_eq!(names(&fs, ROOT).len(), 7);
    c.check();
    c.shutdown();
}

/// A create that opens (`MakeReq.open`) sent twice with one token, as after a lost
/// reply: both answered as made and open, the file opened once, so that one release of
/// it unlinked frees it.
#[test]
fn a_create_sent_again_is_opened_once() {
    let c = Cluster::start(2, 8192);
    let fs = c.client();
    let home = c.cfg.servers()[cairn_cluster::giga::home_of(ROOT) as usize].addr;
    let req = proto::MakeReq {
        h: header(&c),
        dir: ROOT,
        name: b"f".to_vec(),
        mode: libc::S_IFREG | 0o644,
        token: 77,
        open: true,
        open_flags: libc::O_RDWR,
        ..Default::default()
    };
    let mut ino = 0;
    for _ in 0..2 {
        let b = raw_call(
            &c.cfg,
            home,
            "/cairn.cluster.v1.Meta/Make",
            req.encode_to_vec(),
        );
        let rep = proto::EntryReply::decode(b.unwrap().as_slice()).unwrap();
        assert!(rep.status.is_none() && rep.opened, "{rep:?}");
        assert!(ino == 0 || ino == rep.ino, "{rep:?}");
        ino = rep.ino;
    }
    fs.unlink(&R, ROOT, b"f").unwrap();
    assert_eq!(fs.getattr(ino).unwrap().nlink, 0);
    fs.release(&R, ino).unwrap();
    assert_eq!(fs.getattr(ino).unwrap_err().0, libc::ENOENT);
    c.check();
    c.shutdown();
}

/// `MakeBatch` from a raw client: more items than allowed is refused whole; bad items
/// (an over-long name, a directory, a name that exists, a missing directory) get their
/// own errors while the good ones in the same batch are made; an item with another
/// cluster's header refuses the batch; nothing else changes.
#[test]
fn malformed_make_batches() {
    let c = Cluster::start(1, 8192);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    fs.create(&R, d, b"taken", 0o644).unwrap();
    let s0 = c.cfg.servers()[0].addr;
    let item = |dir: u64, name: &[u8], mode: u32| proto::MakeReq {
        h: header(&c),
        dir,
        name: name.to_vec(),
        mode,
        ..Default::default()
    };
    let call = |items: Vec<proto::MakeReq>| {
        raw_call(
            &c.cfg,
            s0,
            "/cairn.cluster.v1.Meta/MakeBatch",
            proto::MakeBatchReq { items }.encode_to_vec(),
        )
    };
    // Too many items.
    let many = (0..1025)
        .map(|i| item(d, format!("m{i}").as_bytes(), libc::S_IFREG | 0o644))
        .collect();
    let e = call(many).unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert_eq!(names(&fs, d), vec![b"taken".to_vec()]);
    // Good and bad items together: one answer each, in order.
    let rep = call(vec![
        item(d, b"good1", libc::S_IFREG | 0o644),
        item(d, &[b'x'; 300], libc::S_IFREG | 0o644),
        item(d, b"sub", libc::S_IFDIR | 0o755),
        item(d, b"taken", libc::S_IFREG | 0o644),
        item(d + 999, b"lost", libc::S_IFREG | 0o644),
        item(d, b"good2", libc::S_IFREG | 0o644),
    ])
    .unwrap();
    let rep = proto::MakeBatchReply::decode(rep.as_slice()).unwrap();
    assert!(rep.status.is_none(), "{rep:?}");
    let errnos: Vec<u32> = rep
        .items
        .iter()
        .map(|r| r.status.as_ref().map_or(0, |s| s.errno))
        .collect();
    assert_eq!(errnos[0], 0);
    assert_eq!(errnos[1], libc::ENAMETOOLONG as u32);
    assert_eq!(errnos[2], libc::EINVAL as u32);
    assert_eq!(errnos[3], libc::EEXIST as u32);
    assert_ne!(
        errnos[4], 0,
        "a create into a missing directory: {errnos:?}"
    );
    assert_eq!(errnos[5], 0);
    assert_ne!(rep.items[0].ino, rep.items[5].ino);
    assert_eq!(
        names(&fs, d),
        vec![b"good1".to_vec(), b"good2".to_vec(), b"taken".to_vec()]
    );
    // An item of another cluster refuses the whole batch.
    let mut other = item(d, b"intruder", libc::S_IFREG | 0o644);
    other.h.as_mut().unwrap().cluster_id ^= 1;
    let e = call(vec![item(d, b"good3", libc::S_IFREG | 0o644), other]).unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert_eq!(names(&fs, d).len(), 3);
    c.check();
}

/// `MakeStream` from a raw client: each message gets its own answer by its number (a
/// message without its create: EINVAL; an over-long name, a directory, a name that
/// exists: their errors) while the good ones are made; a message of another cluster
/// ends the stream with FAILED_PRECONDITION, bytes that are no message end it with an
/// error; the server keeps serving and nothing else changes.
#[test]
fn malformed_make_streams() {
    use tokio_stream::StreamExt;
    let c = Cluster::start(1, 8192);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    fs.create(&R, d, b"taken", 0o644).unwrap();
    let s0 = c.cfg.servers()[0].addr;
    let item = |id: u64, name: &[u8], mode: u32| proto::StreamedMake {
        id,
        req: Some(proto::MakeReq {
            h: header(&c),
            dir: d,
            name: name.to_vec(),
            mode,
            ..Default::default()
        }),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Sends `msgs` (message bytes) on one stream and closes it; the replies, and how the
    // stream ended.
    let stream = |msgs: Vec<Vec<u8>>| {
        rt.block_on(async {
            let ch = common::endpoint(&c.cfg, s0, Some("client-admin"))
                .timeout(Duration::from_secs(5))
                .connect()
                .await
                .unwrap();
            let mut g = tonic::client::Grpc::new(ch);
            g.ready().await.unwrap();
            let out = tokio_stream::iter(msgs);
            let mut replies = Vec::new();
            let end = match g
                .streaming(
                    tonic::Request::new(out),
                    PathAndQuery::from_static("/cairn.cluster.v1.Meta/MakeStream"),
                    Raw,
                )
                .await
            {
                Ok(r) => {
                    let mut s = r.into_inner();
                    loop {
                        match tokio::time::timeout(Duration::from_secs(10), s.next()).await {
                            Ok(Some(Ok(b))) => {
                                replies.push(proto::StreamedEntry::decode(b.as_slice()).unwrap())
                            }
                            Ok(Some(Err(st))) => break Err(st),
                            Ok(None) => break Ok(()),
                            Err(_) => panic!("the stream hung"),
                        }
                    }
                }
                Err(st) => Err(st),
            };
            (replies, end)
        })
    };
    let errno_of = |replies: &[proto::StreamedEntry], id: u64| {
        let r: Vec<_> = replies.iter().filter(|r| r.id == id).collect();
        assert_eq!(r.len(), 1, "one reply for {id}: {replies:?}");
        let rep = r[0].rep.as_ref().expect("an entry");
        rep.status.as_ref().map_or(0, |s| s.errno)
    };
    let (replies, end) = stream(vec![
        item(7, b"good1", libc::S_IFREG | 0o644).encode_to_vec(),
        proto::StreamedMake { id: 8, req: None }.encode_to_vec(),
        item(9, &[b'x'; 300], libc::S_IFREG | 0o644).encode_to_vec(),
        item(10, b"sub", libc::S_IFDIR | 0o755).encode_to_vec(),
        item(11, b"taken", libc::S_IFREG | 0o644).encode_to_vec(),
        item(12, b"good2", libc::S_IFREG | 0o644).encode_to_vec(),
    ]);
    end.unwrap();
    assert_eq!(replies.len(), 6, "{replies:?}");
    assert_eq!(errno_of(&replies, 7), 0);
    assert_eq!(errno_of(&replies, 8), libc::EINVAL as u32);
    assert_eq!(errno_of(&replies, 9), libc::ENAMETOOLONG as u32);
    assert_eq!(errno_of(&replies, 10), libc::EINVAL as u32);
    assert_eq!(errno_of(&replies, 11), libc::EEXIST as u32);
    assert_eq!(errno_of(&replies, 12), 0);
    let want = vec![b"good1".to_vec(), b"good2".to_vec(), b"taken".to_vec()];
    assert_eq!(names(&fs, d), want);
    // Another cluster's header: the stream ends with FAILED_PRECONDITION, unmade.
    let mut other = item(13, b"intruder", libc::S_IFREG | 0o644);
    other.req.as_mut().unwrap().h.as_mut().unwrap().cluster_id ^= 1;
    let (_, end) = stream(vec![other.encode_to_vec()]);
    assert_eq!(end.unwrap_err().code(), tonic::Code::FailedPrecondition);
    // Bytes that are no message, after a good one: that one is made and answered,
    // then the stream ends with an error.
    let (replies, end) = stream(vec![
        item(14, b"good3", libc::S_IFREG | 0o644).encode_to_vec(),
        vec![0xff; 17],
    ]);
    assert!(end.is_err(), "garbage ends the stream with an error");
    assert!(replies.iter().all(|r| r.id == 14), "{replies:?}");
    assert_eq!(names(&fs, d).len(), 3 + replies.len());
    // The server serves on.
    fs.create(&R, d, b"after", 0o644).unwrap();
    c.check();
}

/// A server stops promptly although clients keep streams of creates open to it (it
/// ends them rather than wait for them), and those clients go on creating once it is
/// back.
#[test]
fn shutdown_ends_open_streams() {
    let mut c = Cluster::start(1, 8192);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    fs.create(&R, d, b"a", 0o644).unwrap();
    assert_eq!(fs.streams().0, 1, "the create opened a stream");
    let t = std::time::Instant::now();
    c.shutdown_one(0);
    let took = t.elapsed();
    assert!(
        took < server::SHUTDOWN_GRACE / 2,
        "shutdown waited for the open stream: {took:?}"
    );
    c.restart(0, None);
    fs.create(&R, d, b"b", 0o644).unwrap();
    assert_eq!(fs.streams().0, 2, "a new stream after the restart");
    assert_eq!(names(&fs, d), vec![b"a".to_vec(), b"b".to_vec()]);
    c.check();
}

/// Creates from many threads while their server is stopped cleanly and started again,
/// twice: every create succeeds once the server is back (what the stopping server had
/// read it made and answered, or answered "busy"; what it never read the client sends
/// again), none fails with EIO, and each name exists exactly once.
#[test]
fn creates_go_on_across_clean_restarts() {
    let mut c = Cluster::start(1, 8192);
    let fs = c.client_timeout(Duration::from_secs(20));
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    const THREADS: usize = 8;
    const EACH: usize = 400;
    let made = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fs, made) = (&fs, &made);
                s.spawn(move || {
                    for k in 0..EACH {
                        let name = format!("t{t}-{k}");
                        fs.create(&R, d, name.as_bytes(), 0o644)
                            .unwrap_or_else(|e| panic!("create {name}: {e:?}"));
                        made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            // Restart while creates are on the wire.
            let at = made.load(std::sync::atomic::Ordering::Relaxed);
            while made.load(std::sync::atomic::Ordering::Relaxed) < at + 200 {
                std::thread::sleep(Duration::from_millis(1));
            }
            c.shutdown_one(0);
            c.restart(0, None);
        }
        for w in workers {
            w.join().unwrap();
        }
    });
    assert!(fs.streams().0 >= 3, "streams reopened: {:?}", fs.streams());
    assert_eq!(names(&fs, d).len(), THREADS * EACH);
    c.check();
}
