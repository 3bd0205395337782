//! What the ENQUEUE and CHECK scripts answer a waiter, node by node, and
//! what a majority of those answers says. Pure: no I/O.

use std::time::Duration;

use super::node::NodeResult;
use super::quorum::Quorum;
use crate::backend::{BackendError, LockMode, LockRequest};

/// What one node said about a waiter (the answers of ENQUEUE and CHECK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeAnswer {
    Granted {
        fence: u64,
        /// A `--limit N` holder's slot (0 to N-1), where the node gave one.
        slot: Option<u32>,
    },
    Waiting {
        ahead: usize,
    },
    Busy,
    Withdrawn,
    /// The key is used another way: 0 as a lock, N with --limit N.
    Disagrees {
        theirs: u32,
    },
    /// `--order` below the key's mark, on arrival or at its turn.
    Outdated {
        mark: u64,
    },
    /// A newer `--newest` request took its place (`P sup:ID` names it).
    Superseded,
}

impl NodeAnswer {
    /// One node's answer, None when it failed or is not one.
    pub(super) fn of(answer: &NodeResult<Vec<i64>>) -> Option<NodeAnswer> {
        let v = answer.as_ref().ok()?;
        let (status, value) = (*v.first()?, v.get(1).copied().unwrap_or(0));
        Some(match status {
            0 => NodeAnswer::Busy,
            1 => NodeAnswer::Granted {
                fence: value.max(0) as u64,
                slot: v.get(2).and_then(|&s| u32::try_from(s).ok()),
            },
            2 => NodeAnswer::Waiting {
                ahead: value.max(0) as usize,
            },
            4 => NodeAnswer::Disagrees {
                theirs: value.max(0) as u32,
            },
            5 => NodeAnswer::Outdated {
                mark: value.max(0) as u64,
            },
            6 => NodeAnswer::Superseded,
            _ => NodeAnswer::Withdrawn,
        })
    }
}

/// The fences of the grants that count (`Quorum::counts`).
pub(super) fn grants(sh: &Quorum, answers: &[NodeResult<Vec<i64>>]) -> Vec<u64> {
    answers
        .iter()
        .enumerate()
        .filter(|(i, _)| sh.counts(*i))
        .filter_map(|(_, a)| match NodeAnswer::of(a) {
            Some(NodeAnswer::Granted { fence, .. }) => Some(fence),
            _ => None,
        })
        .collect()
}

/// The slot of a `--limit` grant: the one most of the granting nodes that
/// count gave (the lowest of a tie); the confirming renewal moves the hold
/// to it on the others where it is free (`scripts/renew.lua`). None: no
/// node gave one (an exclusive or shared grant).
pub(super) fn granted_slot(sh: &Quorum, answers: &[NodeResult<Vec<i64>>]) -> Option<u32> {
    let mut votes: std::collections::BTreeMap<u32, usize> = Default::default();
    for (i, a) in answers.iter().enumerate() {
        if let (true, Some(NodeAnswer::Granted { slot: Some(s), .. })) =
            (sh.counts(i), NodeAnswer::of(a))
        {
            *votes.entry(s).or_default() += 1;
        }
    }
    // The first of the most voted: BTreeMap order is the lowest slot first.
    let most = votes.values().copied().max()?;
    votes.into_iter().find(|&(_, n)| n == most).map(|(s, _)| s)
}

/// The longest unconfirmed offer the nodes report to the first in line:
/// by then it has passed on everywhere (to be noticed by the next script).
pub(super) fn offer_left(answers: &[NodeResult<Vec<i64>>]) -> Option<Duration> {
    answers
        .iter()
        .filter_map(|a| match a.as_deref() {
            Ok([2, _, left, ..]) if *left >= 0 => Some(Duration::from_millis(*left as u64)),
            _ => None,
        })
        .max()
}

/// How many wait ahead of us: the smallest number a majority agrees is at
/// least that (the majority-th smallest), or the largest known.
pub(super) fn ahead_in_line(said: &[NodeAnswer], majority: usize) -> Option<usize> {
    let mut aheads: Vec<usize> = said
        .iter()
        .filter_map(|s| match s {
            NodeAnswer::Waiting { ahead } => Some(*ahead),
            _ => None,
        })
        .collect();
    aheads.sort_unstable();
    aheads
        .get(majority.saturating_sub(1))
        .or(aheads.last())
        .copied()
}

/// The refusal of a request whose mode a node's key disagrees with.
pub(super) fn disagreement(request: &LockRequest, said: &[NodeAnswer]) -> Option<BackendError> {
    said.iter().find_map(|s| match s {
        NodeAnswer::Disagrees { theirs } => {
            let theirs = match *theirs {
                0 => LockMode::Exclusive,
                n => LockMode::limit(n),
            };
            Some(request.mode.conflict(&request.key, theirs))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::node::NodeError;
    use super::*;

    #[test]
    fn script_answers() {
        assert_eq!(
            NodeAnswer::of(&Ok(vec![1, 7])),
            Some(NodeAnswer::Granted {
                fence: 7,
                slot: None
            })
        );
        assert_eq!(
            NodeAnswer::of(&Ok(vec![1, 7, -1])),
            Some(NodeAnswer::Granted {
                fence: 7,
                slot: None
            })
        );
        assert_eq!(
            NodeAnswer::of(&Ok(vec![1, 7, 2])),
            Some(NodeAnswer::Granted {
                fence: 7,
                slot: Some(2)
            })
        );
        assert_eq!(
            NodeAnswer::of(&Ok(vec![2, 3])),
            Some(NodeAnswer::Waiting { ahead: 3 })
        );
        assert_eq!(NodeAnswer::of(&Ok(vec![0, 0])), Some(NodeAnswer::Busy));
        assert_eq!(NodeAnswer::of(&Ok(vec![3, 0])), Some(NodeAnswer::Withdrawn));
        assert_eq!(
            NodeAnswer::of(&Ok(vec![5, i64::MAX])),
            Some(NodeAnswer::Outdated {
                mark: i64::MAX as u64
            })
        );
        assert_eq!(
            NodeAnswer::of(&Ok(vec![6, 0])),
            Some(NodeAnswer::Superseded)
        );
        assert_eq!(NodeAnswer::of(&Ok(vec![])), None);
        assert_eq!(
            NodeAnswer::of(&Err(NodeError::Transport("down".into()))),
            None
        );
    }

    #[test]
    fn the_first_in_line_learns_how_long_an_offer_has_left() {
        let t = |s: &str| -> NodeResult<Vec<i64>> { Err(NodeError::Transport(s.into())) };
        assert_eq!(offer_left(&[Ok(vec![2, 0, -1])]), None);
        assert_eq!(
            offer_left(&[Ok(vec![2, 0, 300]), t("down"), Ok(vec![2, 0, 700])]),
            Some(Duration::from_millis(700))
        );
        // Not a waiting answer, or one from before offers: nothing known.
        assert_eq!(offer_left(&[Ok(vec![1, 9]), Ok(vec![2, 3])]), None);
    }

    #[test]
    fn ahead_is_what_a_majority_agrees_on() {
        let w = |ahead| NodeAnswer::Waiting { ahead };
        assert_eq!(ahead_in_line(&[w(3)], 1), Some(3));
        assert_eq!(ahead_in_line(&[w(4), w(1), w(2)], 2), Some(2));
        assert_eq!(ahead_in_line(&[w(5), NodeAnswer::Busy], 2), Some(5));
        assert_eq!(ahead_in_line(&[], 2), None);
    }
}
