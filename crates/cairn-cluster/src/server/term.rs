//! The term a task works in.
//!
//! A replica that loses the lead and wins it again (a pause, an isolation that ends
//! before the group elects another, or a later election it wins) gets a new term and a
//! new state rebuilt from the rows, but the tasks of its earlier term go on: a
//! request's handler waiting for a peer, an intent driven by the background runner. If
//! such a task kept writing and calling in the new term, it would act on what it read
//! in the old one — drive an intent the new term's runner already finished (a mkdir
//! made a second time after its memo was forgotten, its entry overwritten), or
//! acknowledge a change the new leader dropped.
//!
//! So every task that serves a request or drives an intent is bound to the term it
//! began in ([`in_term`]): its changes are proposed only in that term (a later one
//! refuses them, [`crate::raft`]'s `Core::propose_in`), its calls to other servers
//! carry that term (their fences refuse it once a later term has called), and its reply
//! waits for that term's commit. A task not bound to a term (housekeeping, recovery)
//! works in whichever term is current.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    /// The term of the task being polled, when it is bound to one.
    static TASK_TERM: u64;
}

thread_local! {
    /// The term of the task that handed this thread its store work
    /// ([`with_thread_term`]), while it runs.
    static THREAD_TERM: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The term the current task (or the store work it handed to this thread) is bound
/// to, if any.
pub(crate) fn bound_term() -> Option<u64> {
    TASK_TERM
        .try_with(|t| *t)
        .ok()
        .or_else(|| THREAD_TERM.with(Cell::get))
}

/// `fut`, bound to `term` (0: a group of one, which has no terms).
pub(crate) fn in_term<F: Future>(term: u64, fut: F) -> impl Future<Output = F::Output> {
    TASK_TERM.scope(term, fut)
}

/// Runs `f` on this thread bound to `term` (the term of the task that handed it the
/// work), restoring what was bound before.
pub(crate) fn with_thread_term<T>(term: Option<u64>, f: impl FnOnce() -> T) -> T {
    /// Puts back what was bound before, even if `f` unwinds.
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD_TERM.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(THREAD_TERM.with(|c| c.replace(term)));
    f()
}

#[cfg(test)]
mod tests {
    use super::{bound_term, in_term, with_thread_term};

    #[tokio::test]
    async fn a_task_and_the_threads_it_hands_work_to_see_its_term() {
        assert_eq!(bound_term(), None);
        let seen = in_term(7, async {
            let here = bound_term();
            let t = bound_term();
            let there = tokio::task::spawn_blocking(move || with_thread_term(t, bound_term))
                .await
                .unwrap_or(None);
            (here, there)
        })
        .await;
        assert_eq!(seen, (Some(7), Some(7)));
        assert_eq!(bound_term(), None);
        assert_eq!(with_thread_term(Some(3), bound_term), Some(3));
        assert_eq!(bound_term(), None);
    }
}
