//! Whose a hold is: its token's identity (`--token-file`), what a release
//! or reclaim may end by it, and a session hold's secret.

use std::sync::Arc;

/// A token's fingerprint, the first 8 bytes of its SHA-256: never 0.
pub(crate) type Fingerprint = std::num::NonZeroU64;

/// Who a hold was granted to (`--token-file`): the token's fingerprint,
/// which tells its holds from others', and the name the log and `keys`
/// show (the line's `name=`, else `token:` and the fingerprint in hex).
/// Neither tells anything of the token.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Identity {
    pub fingerprint: Fingerprint,
    pub name: Box<str>,
}

/// A hold's owner (`server::tokens::Owner`): one allocation per token,
/// shared by its holds; an `Option` of it is 8 bytes (an `Ask` is part of
/// every parked waiter).
pub(crate) type Owner = Arc<Identity>;

/// Whose holds a release (or a reclaim) may end: any, or only those of one
/// token (a `lock` role's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    Any,
    Only(Fingerprint),
}

impl Whose {
    /// Whether a hold of `owner` is one this may release.
    pub(crate) fn may_release(self, owner: Option<&Owner>) -> bool {
        match self {
            Whose::Any => true,
            Whose::Only(f) => owner.is_some_and(|o| o.fingerprint == f),
        }
    }
}

/// The secret of a session hold, sent to its holder with the grant (when
/// its Hello asked for one) and asked back with a Reclaim: the fencing
/// token, which `keys` shows, does not let anyone else take the hold.
pub(crate) type Secret = [u8; SECRET_LEN];

/// The bytes of a [`Secret`] and of its digest (the protocol's).
pub(crate) const SECRET_LEN: usize = crate::proto::SECRET_LEN;

/// What the table and the log keep of a secret: the first 16 bytes of its
/// SHA-256, never the secret.
pub(crate) fn secret_digest(secret: &Secret) -> Secret {
    use sha2::{Digest, Sha256};
    let full: [u8; 32] = Sha256::digest(secret).into();
    full[..SECRET_LEN].try_into().expect("16 bytes")
}
