use proptest::prelude::*;

use super::*;

#[test]
fn a_record_is_durable_once_the_sync_that_took_it_completed() {
    let mut s = ShardSeqs::recovered(10);
    assert!(s.is_durable(10, Cover::All), "what open found is durable");
    s.append(11, false);
    assert!(!s.is_durable(11, Cover::All), "appended");
    assert!(s.is_durable(10, Cover::All), "earlier records stay durable");
    let t = s.take();
    assert!(!s.is_durable(11, Cover::All), "taken, not synced");
    s.append(12, false);
    s.synced(t);
    assert!(s.is_durable(11, Cover::All));
    assert!(!s.is_durable(12, Cover::All), "appended after the take");
    assert_eq!(s.last_appended(), 12);
}

#[test]
fn a_later_sync_covers_an_earlier_take_whose_sync_did_not_complete() {
    let mut s = ShardSeqs::recovered(0);
    s.append(1, false);
    let _failed = s.take();
    s.append(2, false);
    assert!(!s.is_durable(1, Cover::All));
    let t = s.take();
    s.synced(t);
    assert!(s.is_durable(2, Cover::All));
}

#[test]
fn an_older_sync_completing_late_does_not_cover_a_newer_take() {
    let mut s = ShardSeqs::recovered(0);
    s.append(1, false);
    let t1 = s.take();
    s.append(2, false);
    let t2 = s.take();
    s.synced(t2);
    s.synced(t1);
    assert!(s.is_durable(2, Cover::All), "the mark never goes back");
    let mut s = ShardSeqs::recovered(0);
    s.append(1, false);
    let t1 = s.take();
    s.append(2, false);
    let _t2 = s.take();
    s.synced(t1);
    assert!(s.is_durable(1, Cover::All));
    assert!(!s.is_durable(2, Cover::All));
}

#[test]
fn logged_records_do_not_make_a_shard_owe_an_unlogged_sync() {
    let mut s = ShardSeqs::recovered(0);
    s.append(1, true);
    s.append(2, true);
    assert!(s.is_durable(2, Cover::Unlogged), "nothing unlogged");
    assert!(!s.is_durable(2, Cover::All), "but not durable");
    s.append(3, false);
    assert!(s.is_durable(2, Cover::Unlogged));
    assert!(!s.is_durable(3, Cover::Unlogged));
    let t = s.take();
    assert!(!s.is_durable(3, Cover::Unlogged));
    s.append(4, true);
    s.synced(t);
    assert!(s.is_durable(4, Cover::Unlogged), "4 is logged");
    assert!(!s.is_durable(4, Cover::All));
}

#[test]
fn the_durable_mark_only_rises() {
    let t = SeqTracker::new(5, SeqState::default());
    assert_eq!(
        (t.assign(), t.assign(), t.next(), t.last_assigned()),
        (5, 6, 7, 6)
    );
    t.mark_durable(6);
    t.mark_durable(3);
    assert_eq!(t.durable(), 6);
}

#[test]
fn the_watermark_is_written_when_it_rises_or_segments_are_listed() {
    let state = SeqState {
        watermark: 4,
        ..SeqState::default()
    };
    let t = SeqTracker::new(10, state);
    assert_eq!(t.durable(), 4, "the recorded watermark is durable");
    let mut writes = Vec::new();
    t.raise_watermark(3, &[], |s| {
        writes.push(s.clone());
        Ok(())
    })
    .unwrap();
    assert!(writes.is_empty(), "nothing changed");
    t.raise_watermark(7, &[(0, 2, 1)], |s| {
        writes.push(s.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!((t.watermark(), t.durable()), (7, 7));
    assert_eq!(writes.last().unwrap().dropped, vec![(0, 2, 1)]);
    t.raise_watermark(8, &[], |s| {
        writes.push(s.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(
        writes.last().unwrap().dropped,
        vec![(0, 2, 1)],
        "listed until dropped"
    );
    t.dropped(0, 2);
    t.raise_watermark(9, &[], |s| {
        writes.push(s.clone());
        Ok(())
    })
    .unwrap();
    assert!(writes.last().unwrap().dropped.is_empty());
    assert_eq!(writes.len(), 3);
}

#[test]
fn a_failed_seqstate_write_changes_nothing_but_the_list() {
    let t = SeqTracker::new(10, SeqState::default());
    let err = t.raise_watermark(5, &[(1, 3, 2)], |_| {
        Err(crate::Error::InvalidArgument("no".into()))
    });
    assert!(err.is_err());
    assert_eq!((t.watermark(), t.durable()), (0, 0));
    let mut dropped = Vec::new();
    t.raise_watermark(5, &[], |s| {
        dropped = s.dropped.clone();
        Ok(())
    })
    .unwrap();
    assert_eq!(dropped, vec![(1, 3, 2)], "still listed");
}

/// One step of a shard's life, for the model test.
#[derive(Clone, Debug)]
enum Step {
    /// A write of `records` records (a batch's share of one shard), numbered `gap` after
    /// the last one.
    Append { gap: u64, records: u8, logged: bool },
    /// A sync takes the buffer.
    Take,
    /// The sync of one of the takes not handed back yet completes.
    Synced(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1..4u64, 1..3u8, any::<bool>())
            .prop_map(|(gap, records, logged)| Step::Append { gap, records, logged }),
        1 => Just(Step::Take),
        1 => any::<usize>().prop_map(Step::Synced),
    ]
}

/// Where a record stands in the model.
#[derive(Clone, Copy, PartialEq, Debug)]
enum At {
    Appended,
    Taken(usize),
    Durable,
}

proptest! {
    /// Against a model that follows each record: `is_durable` never says a record is
    /// durable that is not (a completed sync makes durable what its take and every
    /// earlier take took), and right after a take's sync, with nothing appended since,
    /// it says every record is.
    #[test]
    fn shard_seqs_follow_a_model_of_each_record(
        start in 0..5u64,
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let mut s = ShardSeqs::recovered(start);
        let mut model: Vec<(u64, bool, At)> = Vec::new();
        let mut takes: Vec<(usize, Taken)> = Vec::new();
        let (mut last, mut next_take) = (start, 0);
        for st in steps {
            match st {
                Step::Append { gap, records, logged } => {
                    last += gap;
                    for _ in 0..records {
                        s.append(last, logged);
                        model.push((last, logged, At::Appended));
                    }
                }
                Step::Take => {
                    for r in model.iter_mut().filter(|r| r.2 == At::Appended) {
                        r.2 = At::Taken(next_take);
                    }
                    takes.push((next_take, s.take()));
                    next_take += 1;
                }
                Step::Synced(i) if !takes.is_empty() => {
                    let (id, t) = takes.remove(i % takes.len());
                    for r in model.iter_mut() {
                        if matches!(r.2, At::Taken(k) if k <= id) {
                            r.2 = At::Durable;
                        }
                    }
                    s.synced(t);
                    let fresh = id + 1 == next_take;
                    if fresh && model.iter().all(|r| r.2 != At::Appended) {
                        prop_assert!(s.is_durable(last, Cover::All));
                    }
                }
                Step::Synced(_) => {}
            }
            for seq in 0..=last + 1 {
                for cover in [Cover::All, Cover::Unlogged] {
                    let model_durable = model
                        .iter()
                        .filter(|r| r.0 <= seq && (cover == Cover::All || !r.1))
                        .all(|r| r.2 == At::Durable);
                    if s.is_durable(seq, cover) {
                        prop_assert!(model_durable, "{seq} {cover:?} {s:?} {model:?}");
                    }
                }
            }
        }
    }
}
