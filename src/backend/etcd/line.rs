//! Who holds a key, from the modes of its queue keys in create-revision
//! order: etcd's rwmutex recipe for exclusive and shared keys (a reader
//! waits for every writer created before it, a writer for every key), the
//! semaphore rule for `--limit N` (held while fewer than N keys are older).
//! A key that is not lc-cli's (`etcdctl lock`'s) counts as exclusive. Pure.

use crate::backend::{BackendError, LockMode};

/// Whether a key in `mode` holds, behind `ahead` (every older key, oldest
/// first). Keys are only ever deleted ahead of it (new ones come behind),
/// so once true it stays true while the key lives.
pub(super) fn granted(mode: LockMode, ahead: &[LockMode]) -> bool {
    match mode {
        LockMode::Exclusive => ahead.is_empty(),
        LockMode::Shared => !ahead.contains(&LockMode::Exclusive),
        LockMode::Limit(n) => ahead.len() < n.get() as usize,
    }
}

/// Which keys of a whole queue (oldest first) hold.
pub(super) fn holders(queue: &[LockMode]) -> Vec<bool> {
    (0..queue.len())
        .map(|i| granted(queue[i], &queue[..i]))
        .collect()
}

/// How many of `ahead` do not hold: the place in line.
pub(super) fn waiting_ahead(ahead: &[LockMode]) -> usize {
    holders(ahead).iter().filter(|h| !**h).count()
}

/// The key ahead (an index into `ahead`) whose deletion a key in `mode`
/// waits for: the youngest it must outlast; None for a limit key, which
/// waits for any deletion.
pub(super) fn blocker(mode: LockMode, ahead: &[LockMode]) -> Option<usize> {
    match mode {
        LockMode::Exclusive => ahead.len().checked_sub(1),
        LockMode::Shared => ahead.iter().rposition(|m| *m == LockMode::Exclusive),
        LockMode::Limit(_) => None,
    }
}

/// A request that disagrees with an older key: a limit key behind any key
/// not of the same N, or a lock key (exclusive or shared) behind a limit
/// key. Younger keys are refused by their own check, so the queue a grant
/// is counted in never mixes.
pub(super) fn conflict(key: &str, mode: LockMode, ahead: &[LockMode]) -> Result<(), BackendError> {
    match ahead.iter().find(|theirs| !mode.agrees(**theirs)) {
        Some(theirs) => Err(mode.conflict(key, *theirs)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: LockMode = LockMode::Exclusive;
    const S: LockMode = LockMode::Shared;

    #[test]
    fn readers_share_until_a_writer() {
        assert_eq!(holders(&[S, S, X, S, S]), [true, true, false, false, false]);
        assert_eq!(holders(&[X, S, S]), [true, false, false]);
        assert_eq!(holders(&[S, X]), [true, false]);
        assert_eq!(waiting_ahead(&[S, S, X, S]), 2);
        assert_eq!(blocker(S, &[S, X, S, X, S]), Some(3));
        assert_eq!(blocker(S, &[S, S]), None);
        assert_eq!(blocker(X, &[S, S]), Some(1));
        assert_eq!(blocker(X, &[]), None);
    }

    #[test]
    fn limit_n_holds_while_fewer_than_n_are_older() {
        let l3 = LockMode::limit(3);
        assert_eq!(holders(&[l3; 5]), [true, true, true, false, false]);
        assert!(granted(l3, &[l3, l3]));
        assert!(!granted(l3, &[l3, l3, l3]));
        assert_eq!(blocker(l3, &[l3; 4]), None);
    }

    #[test]
    fn mixing_limits_and_locks_is_refused() {
        let l2 = LockMode::limit(2);
        assert!(conflict("k", S, &[X, S]).is_ok());
        assert!(conflict("k", l2, &[l2]).is_ok());
        for (mode, ahead) in [(l2, X), (l2, LockMode::limit(3)), (X, l2), (S, l2)] {
            let e = conflict("k", mode, &[ahead]).unwrap_err();
            assert!(matches!(e, BackendError::ModeConflict { .. }), "{e}");
        }
    }
}
