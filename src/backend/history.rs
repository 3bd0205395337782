//! A key's history (`lc-cli history KEY`, docs/history.md): one entry per
//! ended hold, newest first. The service keeps each entry as a field list
//! (docs/request-fields.md): the request's own fields (note, order, slots)
//! and what the service adds (`slot`, `ident`, `ended`, `status`, `by`), so
//! every backend shares one encoding.

use std::time::{Duration, SystemTime};

use super::fields::FieldList;
use super::LockMode;

/// The default number of entries kept per key (`serve --history N`, and the
/// cap of every backend's history records).
pub const DEFAULT_HISTORY: usize = 100;

/// Why no backend keeps a history in this build (the one line of the
/// refusal, 76, named on each backend page).
pub const HISTORY_NOT_YET: &str =
    "it keeps no history of holds yet (docs/history.md says what is planned)";

/// Who ends a hold by hand (`reset`, `unlock`), as its entry's `by=` says:
/// `LC_SOURCE` where set, else this host's name (the source a lock of this
/// machine would have), every backend alike.
pub fn operator() -> String {
    std::env::var("LC_SOURCE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lc-cli".to_string())
}

/// How a hold ended: the field list's `ended=` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Released by its lc-cli; `status=` is the command's exit status.
    Released,
    /// lc-cli lost it (a lease or session ran out, the service went away).
    Lost,
    /// A newer `--cancel-running` request stopped its command (`by=`).
    Cancelled,
    /// Force-released by `lc-cli reset` (`by=`: the resetting client).
    Reset,
    /// A kept hold's `--expire` ran out.
    Expired,
    /// The service freed it after its holder died (a closed connection, an
    /// ephemeral node's session, a PostgreSQL backend gone).
    Freed,
}

impl Ending {
    pub const ALL: [Ending; 6] = [
        Ending::Released,
        Ending::Lost,
        Ending::Cancelled,
        Ending::Reset,
        Ending::Expired,
        Ending::Freed,
    ];

    /// The `ended=` value.
    pub fn name(self) -> &'static str {
        match self {
            Ending::Released => "released",
            Ending::Lost => "lost",
            Ending::Cancelled => "cancelled",
            Ending::Reset => "reset",
            Ending::Expired => "expired",
            Ending::Freed => "freed",
        }
    }

    pub fn parse(name: &str) -> Option<Ending> {
        Ending::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// One ended hold of a key, as the service kept it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub key: String,
    /// The holder's source (`--source`, by default its host name).
    pub source: String,
    /// The identity of the holder's token, where the service knows one.
    pub identity: Option<String>,
    /// The holder's network address, where the service knows it.
    pub peer: Option<String>,
    pub mode: LockMode,
    /// The hold's fencing token, where the service has one.
    pub token: Option<u64>,
    /// When the hold was granted.
    pub granted: Option<SystemTime>,
    /// How long the request had waited before its grant.
    pub waited: Option<Duration>,
    /// When the hold ended (as recorded: by lc-cli, the service, or whoever
    /// saw it next).
    pub ended_at: Option<SystemTime>,
    /// The request's fields and the ending's: `note`, `order`, `slot`,
    /// `ended`, `status`, `by` (docs/request-fields.md).
    pub fields: FieldList,
}

impl HistoryEntry {
    /// How it ended; None where the record does not say (an older client's
    /// entry, or a name this lc-cli does not know: shown as it is).
    pub fn ending(&self) -> Option<Ending> {
        self.fields.get("ended").and_then(Ending::parse)
    }

    /// The command's exit status, where the releasing lc-cli reported it.
    pub fn status(&self) -> Option<i32> {
        self.fields.get("status").and_then(|s| s.parse().ok())
    }

    /// Who ended it (a reset's or a cancelling request's source).
    pub fn by(&self) -> Option<&str> {
        self.fields.get("by")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endings_round_trip_by_name() {
        for e in Ending::ALL {
            assert_eq!(Ending::parse(e.name()), Some(e));
        }
        assert_eq!(Ending::parse("vanished"), None);
    }

    #[test]
    fn an_entry_reads_its_fields() {
        let mut fields = FieldList::default();
        fields.push("ended", "released");
        fields.push("status", "3");
        fields.push("by", "ops");
        let entry = HistoryEntry {
            key: "k".into(),
            source: "s".into(),
            identity: None,
            peer: None,
            mode: LockMode::Exclusive,
            token: Some(7),
            granted: None,
            waited: None,
            ended_at: None,
            fields,
        };
        assert_eq!(entry.ending(), Some(Ending::Released));
        assert_eq!(entry.status(), Some(3));
        assert_eq!(entry.by(), Some("ops"));
    }
}
