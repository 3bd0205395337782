//! How a key is held: exclusive, shared, or by at most N (`--limit N`).
//! A leaf: the client side (`backend`) and the built-in server (`server`,
//! `wal`) both speak of it.

use std::num::NonZeroU32;

/// How a key is held. Every holder and waiter of a key agrees on it
/// (exclusive and shared requests share one queue; a `--limit N` key takes
/// only `--limit N` requests with the same N): a request that disagrees is
/// refused (`BackendError::ModeConflict`, exit 78).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockMode {
    Exclusive,
    /// With other shared holders, never with an exclusive one.
    Shared,
    /// At most N holders at once, N >= 2 (`--limit 1` is `Exclusive`).
    Limit(NonZeroU32),
}

impl LockMode {
    /// `--limit N` as a mode: N = 1 is today's exclusive lock.
    pub fn limit(n: u32) -> LockMode {
        match NonZeroU32::new(n) {
            Some(n) if n.get() > 1 => LockMode::Limit(n),
            _ => LockMode::Exclusive,
        }
    }

    /// How many may hold the key at once in this mode (a shared lock: any).
    pub fn slots(self) -> Option<u32> {
        match self {
            LockMode::Exclusive => Some(1),
            LockMode::Shared => None,
            LockMode::Limit(n) => Some(n.get()),
        }
    }

    /// The mode as one number, on the wire and in the server's log: 0
    /// shared, 1 exclusive, N a limit of N.
    pub fn word(self) -> u32 {
        match self {
            LockMode::Shared => 0,
            LockMode::Exclusive => 1,
            LockMode::Limit(n) => n.get(),
        }
    }

    pub fn from_word(word: u32) -> LockMode {
        match word {
            0 => LockMode::Shared,
            n => LockMode::limit(n),
        }
    }

    /// How the key is used in this mode, for a refusal: exclusive and shared
    /// requests are one kind (they queue together), each N another.
    pub fn phrase(self) -> String {
        match self {
            LockMode::Exclusive | LockMode::Shared => "as a lock (exclusive or shared)".into(),
            LockMode::Limit(n) => format!("with --limit {n}"),
        }
    }

    /// Whether a request in this mode can queue with one in `other`.
    pub fn agrees(self, other: LockMode) -> bool {
        self.slots_kind() == other.slots_kind()
    }

    fn slots_kind(self) -> Option<u32> {
        match self {
            LockMode::Exclusive | LockMode::Shared => None,
            LockMode::Limit(n) => Some(n.get()),
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockMode::Exclusive => f.write_str("an exclusive lock"),
            LockMode::Shared => f.write_str("a shared lock"),
            LockMode::Limit(n) => write!(f, "--limit {n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_roundtrips() {
        for m in [
            LockMode::Shared,
            LockMode::Exclusive,
            LockMode::limit(2),
            LockMode::limit(500),
        ] {
            assert_eq!(LockMode::from_word(m.word()), m);
        }
        assert!(LockMode::Shared.agrees(LockMode::Exclusive));
        assert!(!LockMode::limit(2).agrees(LockMode::limit(3)));
        assert!(!LockMode::limit(2).agrees(LockMode::Exclusive));
    }
}
