//! The deploy-queue rules (issue 44) over one answer's view of a line:
//! what a request does on arrival (outdated, superseded at once, or join,
//! superseding older `--newest` waiters and cancelling a `--cancel-running`
//! holder) and when its turn comes (outdated or held). Pure: the keys
//! ahead are given as their modes and fields, oldest first.

use crate::backend::fields::Extras;
use crate::backend::LockMode;

use super::line;

/// A key ahead of ours, as the rules see it.
pub(super) struct Other {
    pub mode: LockMode,
    /// Its request's fields: none for a key lc-cli did not write.
    pub extras: Extras,
}

/// What a request does once its key is in line.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Its order is below the key's mark: it leaves at once.
    Outdated(u64),
    /// A waiting `--newest` request ahead ranks above it (an index into
    /// the keys ahead): it leaves at once, superseded by that one.
    Superseded(usize),
    /// It waits; first it supersedes the older `--newest` waiters it ranks
    /// at or above, and asks the `--cancel-running` holders to stop.
    Join {
        victims: Vec<usize>,
        cancel: Vec<usize>,
    },
}

/// Whether `newer` ranks at or above `older` (both `--newest`): by order
/// when both have one, else the later arrival wins.
pub(super) fn ranks(newer: &Extras, older: &Extras) -> bool {
    match (newer.order, older.order) {
        (Some(n), Some(o)) => n >= o,
        _ => true,
    }
}

/// Below the mark: the mark to name.
pub(super) fn outdated(mine: &Extras, mark: Option<u64>) -> Option<u64> {
    match (mine.order, mark) {
        (Some(order), Some(mark)) if order < mark => Some(mark),
        _ => None,
    }
}

pub(super) fn on_arrival(mine: &Extras, mark: Option<u64>, ahead: &[Other]) -> Arrival {
    if let Some(mark) = outdated(mine, mark) {
        return Arrival::Outdated(mark);
    }
    let modes: Vec<LockMode> = ahead.iter().map(|o| o.mode).collect();
    let holds = line::holders(&modes);
    let mut victims = Vec::new();
    let mut cancel = Vec::new();
    for (i, (other, holds)) in ahead.iter().zip(holds).enumerate() {
        if holds {
            // Never superseded; stopped only when both asked for it, and
            // not by a lower order.
            let lower = matches!((mine.order, other.extras.order), (Some(m), Some(h)) if m < h);
            if mine.cancel && other.extras.cancel && !lower {
                cancel.push(i);
            }
        } else if mine.newest && other.extras.newest {
            if !ranks(mine, &other.extras) {
                return Arrival::Superseded(i);
            }
            victims.push(i);
        }
    }
    Arrival::Join { victims, cancel }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: LockMode = LockMode::Exclusive;

    fn req(order: Option<u64>, newest: bool, cancel: bool) -> Extras {
        Extras {
            order,
            newest,
            cancel,
            ..Extras::default()
        }
    }

    fn other(order: Option<u64>, newest: bool, cancel: bool) -> Other {
        Other {
            mode: X,
            extras: req(order, newest, cancel),
        }
    }

    #[test]
    fn the_mark_comes_first() {
        let mine = req(Some(3), true, false);
        assert_eq!(on_arrival(&mine, Some(4), &[]), Arrival::Outdated(4));
        let equal = req(Some(4), false, false);
        assert!(matches!(
            on_arrival(&equal, Some(4), &[]),
            Arrival::Join { .. }
        ));
        assert_eq!(outdated(&req(None, false, false), Some(9)), None);
    }

    #[test]
    fn newer_newest_supersedes_waiters_never_the_holder() {
        let ahead = [
            other(Some(4), true, false),
            other(Some(5), true, false),
            other(None, false, false),
        ];
        let mine = req(Some(7), true, false);
        assert_eq!(
            on_arrival(&mine, None, &ahead),
            Arrival::Join {
                victims: vec![1],
                cancel: vec![]
            }
        );
        // A lower order is superseded at once by the waiting higher one.
        let low = req(Some(5), true, false);
        assert_eq!(
            on_arrival(
                &low,
                None,
                &[other(Some(4), true, false), other(Some(6), true, false)]
            ),
            Arrival::Superseded(1)
        );
        // Equal orders: the later arrival wins; no order: the later wins.
        assert!(ranks(
            &req(Some(6), true, false),
            &req(Some(6), true, false)
        ));
        assert!(ranks(&req(None, true, false), &req(Some(9), true, false)));
        assert!(ranks(&req(Some(1), true, false), &req(None, true, false)));
        // Without --newest, nobody is superseded either way.
        let plain = req(Some(9), false, false);
        assert_eq!(
            on_arrival(
                &plain,
                None,
                &[other(None, false, false), other(Some(1), true, false)]
            ),
            Arrival::Join {
                victims: vec![],
                cancel: vec![]
            }
        );
    }

    #[test]
    fn cancel_only_a_holder_that_asked_for_it() {
        let mine = req(None, false, true);
        for (holder, cancelled) in [
            (other(None, false, true), true),
            (other(None, false, false), false),
            (other(Some(5), false, true), true),
        ] {
            let want = if cancelled { vec![0] } else { vec![] };
            assert_eq!(
                on_arrival(&mine, None, &[holder]),
                Arrival::Join {
                    victims: vec![],
                    cancel: want
                }
            );
        }
        let lower = req(Some(4), false, true);
        assert_eq!(
            on_arrival(&lower, None, &[other(Some(5), false, true)]),
            Arrival::Join {
                victims: vec![],
                cancel: vec![]
            }
        );
        // A waiter with the flag is not cancelled (it runs in turn).
        assert_eq!(
            on_arrival(
                &mine,
                None,
                &[other(None, false, false), other(None, false, true)]
            ),
            Arrival::Join {
                victims: vec![],
                cancel: vec![]
            }
        );
    }
}
