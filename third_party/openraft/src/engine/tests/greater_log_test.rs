//! cairn: a greater last log id seen in a vote response delays this node's elections
//! only while its own log is still behind it.

use std::sync::Arc;

use maplit::btreeset;

use crate::core::ServerState;
use crate::engine::testing::UTConfig;
use crate::engine::Engine;
use crate::engine::LogIdList;
use crate::raft::VoteRequest;
use crate::raft::VoteResponse;
use crate::testing::log_id;
use crate::utime::UTime;
use crate::EffectiveMembership;
use crate::Membership;
use crate::TokioInstant;
use crate::Vote;

/// A candidate of term 2 among voters {1, 2, 3}, its log ending at index 2.
fn candidate() -> Engine<UTConfig> {
    let mut eng = Engine::<UTConfig>::default();
    eng.state.enable_validation(false); // Disable validation for incomplete state
    eng.config.id = 1;
    eng.state.log_ids = LogIdList::new(vec![log_id(1, 1, 2)]);
    eng.state.vote = UTime::new(TokioInstant::now(), Vote::new(2, 1));
    let voters = Membership::<u64, ()>::new(vec![btreeset! {1, 2, 3}], None);
    eng.state
        .membership_state
        .set_effective(Arc::new(EffectiveMembership::new(Some(log_id(1, 1, 1)), voters)));
    eng.new_candidate(*eng.state.vote_ref());
    eng.state.server_state = ServerState::Candidate;
    eng.output.take_commands();
    eng
}

#[test]
fn test_greater_log_delays_only_while_behind() -> anyhow::Result<()> {
    let mut eng = candidate();
    assert!(!eng.is_there_greater_log());

    // Refused by a voter whose log is longer, then by one whose log is shorter than that.
    eng.handle_vote_resp(2, VoteResponse::new(Vote::new(1, 1), Some(log_id(1, 1, 5)), false));
    assert!(eng.is_there_greater_log());
    eng.handle_vote_resp(3, VoteResponse::new(Vote::new(1, 1), Some(log_id(1, 1, 3)), false));
    assert!(eng.is_there_greater_log());

    // Catching up part of the way (as a follower): still behind the greatest one seen.
    eng.state.log_ids = LogIdList::new(vec![log_id(1, 1, 4)]);
    assert!(eng.is_there_greater_log());

    // Caught up with it: no longer delayed, although this node has not stood again.
    eng.state.log_ids = LogIdList::new(vec![log_id(1, 1, 5)]);
    assert!(!eng.is_there_greater_log());
    Ok(())
}

#[test]
fn test_greater_log_forgotten_at_election() -> anyhow::Result<()> {
    let mut eng = candidate();
    eng.handle_vote_resp(2, VoteResponse::new(Vote::new(1, 1), Some(log_id(1, 1, 5)), false));
    assert!(eng.is_there_greater_log());
    eng.reset_greater_log();
    assert!(!eng.is_there_greater_log());

    // A refusal with a log no longer than this node's is not a greater log.
    eng.handle_vote_resp(2, VoteResponse::new(Vote::new(1, 1), Some(log_id(1, 1, 2)), false));
    assert!(!eng.is_there_greater_log());
    Ok(())
}

/// A follower whose log is longer refuses a candidate of term 3; its own election then uses
/// term 4, which the refused candidate (holding a vote for itself in term 3) can grant.
#[test]
fn test_elect_above_a_refused_request_term() -> anyhow::Result<()> {
    let mut eng = Engine::<UTConfig>::default();
    eng.state.enable_validation(false); // Disable validation for incomplete state
    eng.config.id = 1;
    eng.state.log_ids = LogIdList::new(vec![log_id(1, 1, 5)]);
    eng.state.vote = UTime::new(TokioInstant::now(), Vote::new_committed(2, 3));
    let voters = Membership::<u64, ()>::new(vec![btreeset! {1, 2, 3}], None);
    eng.state
        .membership_state
        .set_effective(Arc::new(EffectiveMembership::new(Some(log_id(1, 1, 1)), voters)));
    eng.state.server_state = ServerState::Follower;

    let resp = eng.handle_vote_req(VoteRequest::new(Vote::new(3, 2), Some(log_id(1, 1, 4))));
    assert!(!resp.vote_granted);
    assert_eq!(Vote::new_committed(2, 3), *eng.state.vote_ref());

    eng.elect();
    assert_eq!(Vote::new(4, 1), *eng.state.vote_ref());
    Ok(())
}
