//! Cluster security: mutual TLS refuses parties without a certificate of the cluster's
//! CA (nothing read or written, the server keeps serving, refusals counted); client
//! certificates limit the uids a request may act as (root squash); servers check
//! permissions whatever the client asks; limits on connections and messages.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use cairn_cluster::proto;
use cairn_cluster::proto::meta_client::MetaClient;
use cairn_cluster::proto::peer_client::PeerClient;
use cairn_cluster::tls::CertSpec;
use cairn_cluster::{Client, ClientError, ClientOptions};
use cairn_fs::{Cred, Errno, FileSystem, ROOT};
use common::{certs, client_as, endpoint, endpoint_with, Cluster};

const R: Cred = Cred::ROOT;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A create of `name` in the root directory through `ep`, as root, with checks off.
fn create_through(c: &Cluster, ep: tonic::transport::Endpoint, name: &[u8]) -> Result<(), String> {
    let req = proto::MakeReq {
        h: Some(proto::Header {
            cluster_id: c.cfg.cluster_id(),
            cred: Some(proto::Cred {
                uid: 0,
                gid: 0,
                groups: vec![],
            }),
            no_checks: true,
            client: 0,
        }),
        dir: ROOT,
        name: name.to_vec(),
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    };
    rt().block_on(async move {
        let ch = ep
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let rep = MetaClient::new(ch)
            .make(req)
            .await
            .map_err(|s| format!("{s:?}"))?
            .into_inner();
        match rep.status {
            Some(s) if s.errno != 0 => Err(format!("errno {}", s.errno)),
            _ => Ok(()),
        }
    })
}

#[test]
fn only_certificates_of_the_cluster_ca_get_in() {
    let c = Cluster::start(2, 8192);
    let fs = c.client();
    fs.mkdir(&R, ROOT, b"before", 0o755).unwrap();
    let s0 = c.cfg.servers()[0].addr;
    let h0 = c.servers[0].as_ref().unwrap();
    let refused0 = h0.refused_connections();

    // The control: the admin certificate gets in.
    create_through(&c, endpoint(&c.cfg, s0, Some("client-admin")), b"ok").unwrap();

    let ca = &certs().1;
    let other = cairn_cluster::tls::CertAuthority::new("another CA").unwrap();
    let mut expired = CertSpec::client("admin", Some("*"));
    expired.expired = true;
    let mut server_only = CertSpec::client("admin", Some("*"));
    server_only.server_auth = true;
    server_only.client_auth = false;
    let cases: Vec<(&str, Option<(String, String)>)> = vec![
        ("no certificate", None),
        (
            "another CA",
            Some(other.issue(&CertSpec::client("admin", Some("*"))).unwrap()),
        ),
        ("expired", Some(ca.issue(&expired).unwrap())),
        ("serverAuth only", Some(ca.issue(&server_only).unwrap())),
    ];
    for (i, (what, id)) in cases.into_iter().enumerate() {
        let name = format!("bad{i}");
        let e = create_through(&c, endpoint_with(&c.cfg, s0, id), name.as_bytes()).expect_err(what);
        eprintln!("{what}: {e}");
    }
    // Plain TCP (an --insecure client) to a TLS server.
    let mut plain = c.cfg.clone();
    plain.set_insecure(true);
    match Client::with_config(
        plain,
        ClientOptions {
            timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            creates: cairn_cluster::Creates::Stream,
        },
    ) {
        Ok(p) => assert!(p.lookup(&R, ROOT, b"before").is_err()),
        Err(e) => eprintln!("plain client: {e}"),
    }
    // Every one was refused at the handshake and counted; nothing was written.
    let refused = c.servers[0].as_ref().unwrap().refused_connections() - refused0;
    assert!(refused >= 5, "refused {refused}");
    for i in 0..4 {
        assert_eq!(
            fs.lookup(&R, ROOT, format!("bad{i}").as_bytes()).err(),
            Some(Errno(libc::ENOENT))
        );
    }
    // The server kept serving.
    assert!(fs.lookup(&R, ROOT, b"ok").is_ok());
    fs.mkdir(&R, ROOT, b"after", 0o755).unwrap();
    c.check();
    c.shutdown();
}

#[test]
fn a_client_certificate_cannot_call_the_server_to_server_service() {
    let c = Cluster::start(1, 8192);
    let s0 = c.cfg.servers()[0].addr;
    let r = rt().block_on(async {
        let ch = endpoint(&c.cfg, s0, Some("client-admin"))
            .connect()
            .await
            .unwrap();
        PeerClient::new(ch)
            .touch_dirs(proto::TouchReq::default())
            .await
    });
    assert_eq!(r.unwrap_err().code(), tonic::Code::PermissionDenied);
    c.shutdown();
}

#[test]
fn root_squash_and_uid_lists() {
    let c = Cluster::start(2, 8192);
    let admin = c.client();
    let open = admin.mkdir(&R, ROOT, b"open", 0o777).unwrap().ino;
    // `user`: every uid but 0. Root runs as nobody.
    let user = client_as(&c, "user");
    let a = user.create(&R, open, b"by-root", 0o644).unwrap();
    assert_eq!((a.uid, a.gid), (65534, 65534));
    assert_eq!(
        user.create(&R, ROOT, b"x", 0o644).err(),
        Some(Errno(libc::EACCES)),
        "squashed root may not write the root directory (0755 root)"
    );
    let me = Cred::new(1000, 1000);
    assert_eq!(user.create(&me, open, b"mine", 0o600).unwrap().uid, 1000);
    // Asking to skip the server's checks is ignored for a certificate without uid 0.
    user.set_permission_checks(false);
    assert_eq!(
        user.create(&me, ROOT, b"y", 0o644).err(),
        Some(Errno(libc::EACCES))
    );
    user.set_permission_checks(true);
    // `u1000`: uids 1000-1999 only.
    let u = client_as(&c, "u1000");
    assert_eq!(u.create(&me, open, b"u-ok", 0o644).unwrap().uid, 1000);
    assert_eq!(
        u.create(&Cred::new(5, 5), open, b"u-5", 0o644).unwrap().uid,
        65534
    );
    // The admin certificate allows root.
    assert_eq!(admin.create(&R, ROOT, b"root-file", 0o644).unwrap().uid, 0);
    // Reading the servers' rows needs a certificate that allows uid 0; status does not,
    // but without it each server answers only what it keeps in memory, marked partial.
    let ucfg = u.config().clone();
    match cairn_cluster::admin::check(&ucfg, Duration::from_secs(5)) {
        Err(ClientError::Protocol { msg, .. }) => assert!(msg.contains("refused"), "{msg}"),
        r => panic!("expected a refusal, got {r:?}"),
    }
    let part = cairn_cluster::admin::status(&ucfg, Duration::from_secs(5));
    assert!(
        part.servers
            .iter()
            .all(|s| s.up && s.partial && s.inodes == 0),
        "{part:#?}"
    );
    assert!(part.largest.is_empty(), "{part:#?}");
    let whole = cairn_cluster::admin::status(&c.cfg, Duration::from_secs(5));
    assert!(
        whole.servers.iter().all(|s| s.up && !s.partial),
        "{whole:#?}"
    );
    // The root, "open" and the files in them; both certificates see the same
    // partitions and entries.
    let inodes: u64 = whole.servers.iter().map(|s| s.inodes).sum();
    assert!(inodes >= 7, "{whole:#?}");
    assert!(!whole.largest.is_empty(), "{whole:#?}");
    for (p, w) in part.servers.iter().zip(&whole.servers) {
        assert_eq!((p.partitions, p.entries), (w.partitions, w.entries));
    }
    c.check();
    c.shutdown();
}

#[test]
fn idle_connections_and_bad_messages_do_not_stop_a_server() {
    let mut c = Cluster::start(1, 8192);
    c.shutdown_one(0);
    let mut o = c.opts(0, None);
    o.handshake_timeout = Duration::from_millis(500);
    c.servers[0] = Some(cairn_cluster::server::start(o).unwrap());
    let fs = c.client();
    fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    let s0 = c.cfg.servers()[0].addr;
    // Many connections that never send, and some that send garbage or stop halfway.
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut s = std::net::TcpStream::connect(s0).unwrap();
        if i % 10 == 0 {
            let _ = s.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2]);
        }
        if i % 10 == 1 {
            let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n");
        }
        idle.push(s);
    }
    // Others are served meanwhile, within their timeouts: a client connected before,
    // and a new one.
    let t = Instant::now();
    for i in 0..20 {
        fs.create(&R, ROOT, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let fresh = c.client();
    assert!(fresh.lookup(&R, ROOT, b"f1").is_ok());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // The idle ones are dropped after the handshake timeout and counted.
    let end = Instant::now() + Duration::from_secs(20);
    while c.servers[0].as_ref().unwrap().refused_connections() < 300 {
        assert!(Instant::now() < end, "idle connections not refused");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(idle);
    // An authenticated client's malformed, truncated and oversized messages: errors.
    let rt = rt();
    let big = proto::LookupReq {
        h: None,
        dir: ROOT,
        name: vec![b'x'; 20 << 20],
    };
    rt.block_on(async {
        let ch = endpoint(&c.cfg, s0, Some("client-admin"))
            .connect()
            .await
            .unwrap();
        let mut m = MetaClient::new(ch).max_encoding_message_size(64 << 20);
        let e = m.lookup(big).await.unwrap_err();
        assert!(
            matches!(
                e.code(),
                tonic::Code::OutOfRange | tonic::Code::ResourceExhausted | tonic::Code::Internal
            ),
            "{e:?}"
        );
        // A header-less message is refused as from another cluster, not a crash.
        let e = m
            .lookup(proto::LookupReq {
                h: None,
                dir: ROOT,
                name: b"d".to_vec(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    });
    assert!(fs.lookup(&R, ROOT, b"d").unwrap().is_dir());
    c.check();
    c.shutdown();
}
