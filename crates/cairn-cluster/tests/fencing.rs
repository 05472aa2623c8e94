//! Calls between servers carry the term in which the sender leads its group; a server
//! refuses a call of an earlier term than one it has served from that group (a leader
//! its group replaced, back from a pause), and remembers the term across restarts.
//! Sent through raw gRPC with a server's certificate, as that server's replaced and
//! current leaders would.

mod common;

use cairn_cluster::proto;
use cairn_cluster::proto::peer_client::PeerClient;
use common::{endpoint, Cluster};
use tonic::transport::Channel;

fn header(c: &Cluster, term: u64, intent: u64) -> Option<proto::PeerHeader> {
    Some(proto::PeerHeader {
        cluster_id: c.cfg.cluster_id(),
        from: 1,
        intent: Some(proto::IntentId {
            server: 1,
            id: intent,
        }),
        term,
        ..Default::default()
    })
}

async fn as_server_one(c: &Cluster) -> PeerClient<Channel> {
    let s0 = c.cfg.servers()[0].addr;
    let ch = endpoint(&c.cfg, s0, Some("server-1"))
        .connect()
        .await
        .unwrap();
    PeerClient::new(ch)
}

async fn touch(p: &mut PeerClient<Channel>, c: &Cluster, term: u64) -> Result<(), tonic::Code> {
    let req = proto::TouchReq {
        h: header(c, term, 0),
        times: Vec::new(),
    };
    p.touch_dirs(req).await.map(drop).map_err(|s| s.code())
}

/// A mkdir's directory made at its home for intent 7 of server 1 (the same intent
/// always gets the same directory while its memo lives).
async fn make_dir(p: &mut PeerClient<Channel>, c: &Cluster, term: u64) -> Result<u64, tonic::Code> {
    let req = proto::MakeDirReq {
        h: header(c, term, 7),
        parent: cairn_fs::ROOT,
        name: b"late".to_vec(),
        mode: 0o755,
        uid: 0,
        gid: 0,
        time: 1,
    };
    match p.make_dir(req).await {
        Ok(r) => Ok(r.into_inner().attr.unwrap().ino),
        Err(s) => Err(s.code()),
    }
}

#[test]
fn a_call_from_a_replaced_leader_is_refused_and_the_fence_survives_a_restart() {
    let mut c = Cluster::start(2, 8192);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut p = as_server_one(&c).await;
        let refused = Err(tonic::Code::FailedPrecondition);
        // A group of one's calls (term 0) until a leader of a later term calls.
        assert_eq!(touch(&mut p, &c, 0).await, Ok(()));
        assert_eq!(touch(&mut p, &c, 5).await, Ok(()));
        assert_eq!(touch(&mut p, &c, 5).await, Ok(()));
        assert_eq!(touch(&mut p, &c, 3).await, refused);
        assert_eq!(touch(&mut p, &c, 0).await, refused);
        assert_eq!(touch(&mut p, &c, 6).await, Ok(()));
        assert_eq!(touch(&mut p, &c, 5).await, refused);
    });
    c.kill(0);
    c.restart(0, None);
    rt.block_on(async {
        let mut p = as_server_one(&c).await;
        let refused = Err(tonic::Code::FailedPrecondition);
        assert_eq!(
            touch(&mut p, &c, 5).await,
            refused,
            "forgotten at a restart"
        );
        assert_eq!(touch(&mut p, &c, 6).await, Ok(()));
    });
    c.shutdown();
}

#[test]
fn a_replaced_leader_cannot_make_a_finished_mkdirs_directory_again() {
    let c = Cluster::start(2, 8192);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut p = as_server_one(&c).await;
        // The leader of term 7 makes the directory; asked again, the same one.
        let ino = make_dir(&mut p, &c, 7).await.unwrap();
        assert_eq!(make_dir(&mut p, &c, 7).await, Ok(ino));
        // The leader of term 8 finishes the intent: the memo is forgotten.
        let forget = proto::IntentRef {
            h: header(&c, 8, 7),
        };
        p.forget_memo(forget).await.unwrap();
        // The leader of term 7, back from a pause, drives the intent again: refused.
        // Served, it would make a second directory (as the current leader's call
        // shows: the memo is gone), one no entry names.
        assert_eq!(
            make_dir(&mut p, &c, 7).await,
            Err(tonic::Code::FailedPrecondition)
        );
        let again = make_dir(&mut p, &c, 8).await.unwrap();
        assert_ne!(again, ino);
    });
    c.shutdown();
}
