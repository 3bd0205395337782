//! Slots (issue 45): each hold of a `--limit N` key has one, 0 to N-1,
//! the lowest no other hold of the key has at its grant.

use super::key::{Hold, KeyState};
use crate::mode::LockMode;

impl KeyState {
    /// The slot a new hold in `mode` gets: for `--limit N`, the lowest
    /// of 0 to N-1 that no hold of the key has (the caller checked that
    /// fewer than N hold it); None in the other modes.
    pub(super) fn free_slot(&self, mode: LockMode) -> Option<u32> {
        let LockMode::Limit(n) = mode else {
            return None;
        };
        let mut taken: Vec<u32> = self.holds.iter().filter_map(Hold::slot).collect();
        taken.sort_unstable();
        let mut free = 0;
        for s in taken {
            if s == free {
                free += 1;
            } else if s > free {
                break;
            }
        }
        Some(free.min(n.get() - 1))
    }

    /// Gives each `--limit N` hold without a slot (restored from a log of
    /// an earlier release) the lowest slot free, in grant order.
    pub(super) fn give_slots(&mut self) {
        let unslotted = |h: &Hold| matches!(h.mode, LockMode::Limit(_)) && h.slot().is_none();
        while let Some(pos) = self.holds.iter().position(unslotted) {
            let slot = self.free_slot(self.holds[pos].mode).unwrap_or(0);
            self.holds[pos].set_slot(slot);
        }
    }
}
