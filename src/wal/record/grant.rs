//! What a Grant record carries after its mode, by its tag: nothing (tag
//! 5), a kept hold's deadline (tag 7), the hold's owner and its secret's
//! digest (tag 8), and its request's field list (tag 9), and its slot
//! (tag 12, format version 8, issue 45):
//!
//! - `[7]` ... `[expires_ms:u64le]`
//! - `[8]` ... `[expires_ms:u64le, 0 never][owner:u64le, 0 none][nameLen][name][secretLen: 0 or 16][secret digest]`
//! - `[9]` as 8, then `[fieldsLen:u16le, 1..=1024][field list]`
//! - `[12]` as 8, then `[fieldsLen:u16le, 0..=1024][field list][slot:u32le]`

use super::{MAX_FIELDS, SECRET_DIGEST};

pub(super) const TAG_GRANT: u8 = 5;
pub(super) const TAG_GRANT_EXPIRING: u8 = 7;
pub(super) const TAG_GRANT_OWNED: u8 = 8;
pub(super) const TAG_GRANT_FIELDS: u8 = 9;
pub(super) const TAG_GRANT_SLOT: u8 = 12;

/// Whose a hold is, as its Grant records it (tag 8; none in tags 1 to 7):
/// its token's fingerprint (0: none) and name, and the digest of its
/// session's secret; and what tags 9 and 12 add.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    pub fingerprint: u64,
    pub name: Vec<u8>,
    pub secret: Option<[u8; SECRET_DIGEST]>,
    /// The request's field list (tag 9 or 12; empty: none).
    pub fields: Vec<u8>,
    /// A `--limit N` hold's slot (tag 12).
    pub slot: Option<u32>,
}

/// An [`Ownership`] read in place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnershipRef<'a> {
    pub fingerprint: u64,
    pub name: &'a [u8],
    pub secret: Option<[u8; SECRET_DIGEST]>,
    pub fields: &'a [u8],
    pub slot: Option<u32>,
}

impl Ownership {
    pub fn borrowed(&self) -> OwnershipRef<'_> {
        OwnershipRef {
            fingerprint: self.fingerprint,
            name: &self.name,
            secret: self.secret,
            fields: &self.fields,
            slot: self.slot,
        }
    }
}

impl OwnershipRef<'_> {
    /// Nothing to record (a Grant of tag 5 or 7).
    pub fn is_none(&self) -> bool {
        self.fingerprint == 0 && self.secret.is_none()
    }

    pub fn to_owned(&self) -> Ownership {
        Ownership {
            fingerprint: self.fingerprint,
            name: self.name.to_vec(),
            secret: self.secret,
            fields: self.fields.to_vec(),
            slot: self.slot,
        }
    }
}

/// The tag a Grant with these is written with: the oldest that carries
/// all of it.
pub(super) fn tag(o: &OwnershipRef<'_>, expires_ms: Option<u64>) -> u8 {
    if o.slot.is_some() {
        TAG_GRANT_SLOT
    } else if !o.fields.is_empty() {
        TAG_GRANT_FIELDS
    } else if !o.is_none() {
        TAG_GRANT_OWNED
    } else if expires_ms.is_some() {
        TAG_GRANT_EXPIRING
    } else {
        TAG_GRANT
    }
}

/// Appends what a Grant of `tag` carries after its mode.
pub(super) fn encode_tail(
    out: &mut Vec<u8>,
    tag: u8,
    expires_ms: Option<u64>,
    o: &OwnershipRef<'_>,
) {
    if tag == TAG_GRANT_EXPIRING {
        out.extend_from_slice(&expires_ms.unwrap_or(0).to_le_bytes());
        return;
    }
    if !matches!(tag, TAG_GRANT_OWNED | TAG_GRANT_FIELDS | TAG_GRANT_SLOT) {
        return;
    }
    out.extend_from_slice(&expires_ms.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&o.fingerprint.to_le_bytes());
    let name = &o.name[..o.name.len().min(255)];
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    let secret = o.secret.as_ref().map_or(&[][..], |s| &s[..]);
    out.push(secret.len() as u8);
    out.extend_from_slice(secret);
    if tag != TAG_GRANT_OWNED {
        let fields = &o.fields[..o.fields.len().min(MAX_FIELDS)];
        out.extend_from_slice(&(fields.len() as u16).to_le_bytes());
        out.extend_from_slice(fields);
    }
    if tag == TAG_GRANT_SLOT {
        out.extend_from_slice(&o.slot.unwrap_or(0).to_le_bytes());
    }
}

/// Reads the tail of a Grant of tag 8, 9 or 12 from `cur` (what follows
/// its peer): its 21 bytes of time, token, session flag and mode, then its
/// deadline and ownership. None if it is not one.
#[allow(clippy::type_complexity)]
pub(super) fn parse_owned(tag: u8, cur: &[u8]) -> Option<(&[u8], Option<u64>, OwnershipRef<'_>)> {
    let (fixed, rest) = (cur.get(..37)?, &cur[37..]);
    let (at, fingerprint) = (&fixed[21..29], &fixed[29..37]);
    let at = u64::from_le_bytes(at.try_into().ok()?);
    let mut o = OwnershipRef {
        fingerprint: u64::from_le_bytes(fingerprint.try_into().ok()?),
        ..OwnershipRef::default()
    };
    let (&n, rest) = rest.split_first()?;
    o.name = rest.get(..n as usize)?;
    let (&m, after) = rest[n as usize..].split_first()?;
    let (secret, tail) = after.split_at_checked(m as usize)?;
    if tag == TAG_GRANT_OWNED {
        if !tail.is_empty() {
            return None;
        }
    } else {
        let (len, rest) = tail.split_at_checked(2)?;
        let len = u16::from_le_bytes(len.try_into().ok()?) as usize;
        let (fields, after) = rest.split_at_checked(len)?;
        if len > MAX_FIELDS || (tag == TAG_GRANT_FIELDS && len == 0) {
            return None;
        }
        o.fields = fields;
        match tag {
            TAG_GRANT_SLOT => o.slot = Some(u32::from_le_bytes(after.try_into().ok()?)),
            _ if !after.is_empty() => return None,
            _ => {}
        }
    }
    o.secret = match m {
        0 => None,
        16 => Some(secret.try_into().ok()?),
        _ => return None,
    };
    if o.is_none() && tag == TAG_GRANT_OWNED {
        return None;
    }
    Some((&cur[..21], (at != 0).then_some(at), o))
}
