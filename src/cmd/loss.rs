//! What a lost or frozen hold means while its command runs, for one key
//! (`lock.rs`) and several (`multi.rs`): when to look at a hold's
//! deadlines again, whether lc-cli was stopped past them, how long the
//! stopped command gets, and the one bounded give-back after a loss.

use std::time::{Duration, Instant};

use crate::backend::{Expiry, HeldLock, LostReason};
use crate::guardian::Guardian;

/// How long the one give-back after a loss may take: the loss is already
/// reported, and a service that is away (ZooKeeper confirms a delete only
/// once it is back) must not hold up the exit 75 for the whole retry.
const RELEASE_AFTER_LOSS: Duration = Duration::from_secs(3);

/// The shortest pause between two looks at a hold's deadlines.
pub(super) const EXPIRY_LOOK: Duration = Duration::from_millis(50);

pub(super) async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How long a command stopped after a loss gets between SIGTERM and SIGKILL:
/// `--kill-after`, cut short where the service may hand the key on.
pub(super) fn grace(lost: &LostReason, kill_after: Duration) -> Duration {
    match lost.kill_by {
        Some(by) => kill_after.min(by.saturating_duration_since(Instant::now())),
        None => kill_after,
    }
}

/// A hold whose stop deadline passed `late` ago or more with lc-cli unable
/// to act on it (it was stopped, or starved): a loss, whatever the service
/// says next. So is a command the guardian stopped at the older deadline
/// it last knew (a renewal lc-cli got just before it froze), though the
/// service may still hold the key (it is released).
pub(super) fn frozen_past(
    expiry: Option<Expiry>,
    late: Duration,
    guardian: Option<&Guardian>,
) -> Option<LostReason> {
    let now = Instant::now();
    if let Some(e) = expiry.filter(|e| now >= e.term_at + late) {
        return Some(LostReason::kill_by(
            format!(
                "lc-cli was stopped or starved: no contact with the service confirmed for {:.1} s past its stop deadline, where its guardian stops the command",
                now.saturating_duration_since(e.term_at).as_secs_f64()
            ),
            e.kill_at,
        ));
    }
    guardian.is_some_and(Guardian::stopped_the_command).then(|| {
        LostReason::new(
            "lc-cli was stopped or starved past the stop deadline it had given its guardian, which stopped the command",
        )
    })
}

/// A loss the service (or its silence) reported, said as lc-cli's own
/// freeze where its guardian stopped the command meanwhile: the silence
/// lc-cli wakes to after a SIGSTOP is the freeze's doing, not the
/// service's. A cancel by a newer request stays what it is.
pub(super) fn frozen_first(
    reason: LostReason,
    expiry: Option<Expiry>,
    guardian: Option<&Guardian>,
) -> LostReason {
    if reason.cancelled_by.is_some() || !guardian.is_some_and(Guardian::stopped_the_command) {
        return reason;
    }
    match frozen_past(expiry, Duration::ZERO, guardian) {
        Some(frozen) => LostReason {
            reason: frozen.reason,
            ..reason
        },
        None => reason,
    }
}

/// One release attempt, bounded in time, after a loss: whatever is left is
/// given back, and its outcome is not reported (the loss is), so no error
/// is made up for it.
pub(super) async fn release_attempt(held: &mut Box<dyn HeldLock>) {
    let _ = tokio::time::timeout(RELEASE_AFTER_LOSS, held.release()).await;
}
