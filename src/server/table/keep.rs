//! `--hold-at-least` on the built-in server (issue 45, docs/fleet-jobs.md):
//! a session hold whose command ended early is turned, in one step under
//! the table's mutex, into a kept hold that expires, under the same token,
//! so no moment exists in which another waiter could be granted the key.
//!
//! The log gets the session hold's Release and, right after it, a Grant of
//! the kept hold (the same token, source, start, slot and owner, session 0,
//! the deadline): records the format already has, so older logs read as
//! before and the version does not change. A crash between the two leaves
//! the Release alone: the key comes back free (the window is lost, never a
//! second holder).

use std::time::{Duration, SystemTime};

use super::key::{Hold, NotYours};
use super::{Durable, GrantId, Table, Token, Whose};

impl Table {
    /// Turns session hold `token` of `key` into a kept hold that the server
    /// releases `keep` from now, if `whose` may release it. Ok(None): not
    /// held under that token (taken away). The change is made in memory at
    /// once; its answer waits for the Durable.
    pub(crate) fn keep_session(
        &self,
        key: &[u8],
        token: Token,
        whose: Whose,
        keep: Duration,
    ) -> Result<Option<(GrantId, Durable)>, NotYours> {
        let mut inner = self.lock_inner();
        let Some(hold) = inner
            .keys
            .get(key)
            .and_then(|s| s.holds.iter().find(|h| h.session && h.token == token))
        else {
            return Ok(None);
        };
        if !whose.may_release(hold.owner()) {
            return Err(NotYours);
        }
        let mut holder = hold.holder();
        let source = hold.source.clone();
        holder.session = false;
        holder.secret = None;
        holder.expires = Some(SystemTime::now() + keep);
        let mut durable = inner.record_release(key, token);
        durable.add(inner.record_grant(key, &holder));
        let state = inner.keys.get_mut(key).expect("just seen");
        let hold = state
            .holds
            .iter_mut()
            .find(|h| h.token == token)
            .expect("just seen");
        // Dropping the session's link wakes the task that served it, which
        // finds the hold gone from it and ends without a word.
        *hold = Hold::new(&holder, source, None);
        Ok(Some((holder.id, durable)))
    }
}
