//! A request's extra fields (docs/request-fields.md): what a lock request
//! may carry beyond its key, mode and source (a note, an order, newest-wins,
//! cancel-in-progress, a minimum hold, named slots), and the one encoding
//! every backend sends and stores them in: a *field list*, `name=value`
//! lines in a fixed order, values with `%`, `\n` and `\r` escaped.
//!
//! [`Extras`] is what this lc-cli asks for, checked when it is built;
//! [`FieldList`] is any list read back from a service, names this build
//! does not know kept (and shown), so that a newer client's field does not
//! break an older lc-cli's listing.

use std::fmt::{self, Write as _};
use std::time::Duration;

/// Why a backend refuses the fields it does not take yet.
pub const NOT_YET: &str = "not built for this backend yet";

/// The longest field list, encoded.
pub const MAX_LIST: usize = 1024;
/// The longest note, in bytes of UTF-8.
pub const MAX_NOTE: usize = 200;
/// The longest `--hold-at-least`.
pub const MAX_AT_LEAST: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most slot names, and the longest one.
pub const MAX_SLOTS: usize = 64;
pub const MAX_SLOT_NAME: usize = 32;

/// What a lock request carries beyond its key, mode and source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    /// Why (`--note`, `LC_NOTE`): shown to whoever lists the key.
    pub note: Option<String>,
    /// The version this request deploys (`--order N`).
    pub order: Option<u64>,
    /// Superseded by a newer `--newest` request while it waits.
    pub newest: bool,
    /// Stops a running holder that took the key with it too.
    pub cancel: bool,
    /// The key stays held this long after the grant (`--hold-at-least`).
    pub at_least: Option<Duration>,
    /// The named pool (`--slots a,b,c`).
    pub slots: Vec<String>,
    /// One of a group of requests for several keys, granted together
    /// (`--and` on the built-in server): the group's random id and how
    /// many keys it asks. Set by lc-cli, not an option.
    pub group: Option<(u64, u16)>,
}

/// Why a field cannot be sent (the client says it in one line, status 64).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("--note is empty")]
    EmptyNote,
    #[error("--note is {0} bytes long; at most {MAX_NOTE}")]
    LongNote(usize),
    #[error("--note has a control character (byte {0:#04x}): notes are one line of text")]
    ControlInNote(u32),
    #[error("--order {0} is above 2^63-1")]
    OrderTooHigh(u64),
    #[error("--hold-at-least is longer than 30 days")]
    LongAtLeast,
    #[error("--slots names {0} slots; at most {MAX_SLOTS}")]
    TooManySlots(usize),
    #[error(
        "--slots: {0:?} is not a slot name (1 to {MAX_SLOT_NAME} bytes of letters, digits, '.', '_', '-')"
    )]
    BadSlot(String),
    #[error("--slots names {0:?} twice")]
    DuplicateSlot(String),
    #[error("the request's fields take {0} bytes; at most {MAX_LIST}")]
    TooLong(usize),
}

impl Extras {
    /// True when the request carries nothing extra: it is then sent
    /// exactly as a request without fields is.
    pub fn is_empty(&self) -> bool {
        *self == Extras::default()
    }

    /// The options that set these fields, as a refusal names them
    /// ("--newest and --order").
    pub fn options(&self) -> String {
        let mut names = Vec::new();
        for (set, name) in [
            (self.note.is_some(), "--note"),
            (self.order.is_some(), "--order"),
            (self.newest, "--newest"),
            (self.cancel, "--cancel-running"),
            (self.at_least.is_some(), "--hold-at-least"),
            (!self.slots.is_empty(), "--slots"),
        ] {
            if set {
                names.push(name);
            }
        }
        match names.split_last() {
            None => String::new(),
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        }
    }

    /// True when a deploy-queue rule is asked for (`--order`, `--newest`,
    /// `--cancel-running`).
    pub fn queued(&self) -> bool {
        self.order.is_some() || self.newest || self.cancel
    }

    /// Checks every field against its limits.
    pub fn check(&self) -> Result<(), FieldError> {
        if let Some(note) = &self.note {
            if note.is_empty() {
                return Err(FieldError::EmptyNote);
            }
            if note.len() > MAX_NOTE {
                return Err(FieldError::LongNote(note.len()));
            }
            if let Some(c) = note.chars().find(|c| c.is_control()) {
                return Err(FieldError::ControlInNote(c as u32));
            }
        }
        if let Some(order) = self.order {
            if order > i64::MAX as u64 {
                return Err(FieldError::OrderTooHigh(order));
            }
        }
        if self.at_least.is_some_and(|d| d > MAX_AT_LEAST) {
            return Err(FieldError::LongAtLeast);
        }
        if self.slots.len() > MAX_SLOTS {
            return Err(FieldError::TooManySlots(self.slots.len()));
        }
        for (i, slot) in self.slots.iter().enumerate() {
            if !is_slot_name(slot) {
                return Err(FieldError::BadSlot(slot.clone()));
            }
            if self.slots[..i].contains(slot) {
                return Err(FieldError::DuplicateSlot(slot.clone()));
            }
        }
        let len = self.encode().len();
        if len > MAX_LIST {
            return Err(FieldError::TooLong(len));
        }
        Ok(())
    }

    /// The field list: set fields only, in the order of
    /// docs/request-fields.md's table.
    pub fn encode(&self) -> String {
        let mut list = FieldList::default();
        if let Some(note) = &self.note {
            list.push("note", note);
        }
        if let Some(order) = self.order {
            list.push("order", &order.to_string());
        }
        if self.newest {
            list.push("newest", "1");
        }
        if self.cancel {
            list.push("cancel", "1");
        }
        if let Some(d) = self.at_least {
            list.push("atleast", &d.as_millis().to_string());
        }
        if !self.slots.is_empty() {
            list.push("slots", &self.slots.join(","));
        }
        if let Some((id, n)) = self.group {
            list.push("group", &format!("{id:x}/{n}"));
        }
        list.to_string()
    }

    /// The fields this build knows, read back from a list (a service's
    /// record of a request); a known name with a value that does not parse
    /// is left unset, as an unknown name is (both stay in the list).
    pub fn from_list(list: &FieldList) -> Extras {
        let flag = |name| list.get(name) == Some("1");
        Extras {
            note: list.get("note").map(str::to_string),
            order: list.get("order").and_then(|v| v.parse().ok()),
            newest: flag("newest"),
            cancel: flag("cancel"),
            at_least: list
                .get("atleast")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis),
            slots: list
                .get("slots")
                .map(|v| v.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            group: list.get("group").and_then(parse_group),
        }
    }
}

/// The most keys one group of requests may ask for (`--and`).
pub const MAX_GROUP: u16 = 64;

/// The id and count of a `group=ID/N` value (ID in hex, N from 2 to
/// [`MAX_GROUP`]); None if it is not one.
pub fn parse_group(value: &str) -> Option<(u64, u16)> {
    let (id, n) = value.split_once('/')?;
    let id = u64::from_str_radix(id, 16).ok()?;
    let n: u16 = n.parse().ok()?;
    (2..=MAX_GROUP).contains(&n).then_some((id, n))
}

fn is_slot_name(s: &str) -> bool {
    (1..=MAX_SLOT_NAME).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A field list as read: `(name, value)` pairs in their order, unknown
/// names included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldList(Vec<(String, String)>);

/// Why a field list read from a service does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("a field list of {0} bytes; at most {MAX_LIST}")]
    TooLong(usize),
    #[error("a line of a field list without '=' or not ended by a newline")]
    NotALine,
    #[error("a field name that is empty or not lower-case ASCII letters")]
    BadName,
    #[error("a bad '%' escape in a field's value")]
    BadEscape,
    #[error("a field's value is not UTF-8")]
    NotUtf8,
}

impl FieldList {
    pub fn push(&mut self, name: &str, value: &str) {
        self.0.push((name.to_string(), value.to_string()));
    }

    /// Nothing in it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every `(name, value)`, in their order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// As a JSON object (the first value of a name repeated), for
    /// `--json`: every name, known to this build or not.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (name, value) in self.iter() {
            map.entry(name)
                .or_insert_with(|| serde_json::Value::String(value.to_string()));
        }
        serde_json::Value::Object(map)
    }

    /// The slot a `--limit N` hold was given (the service's `slot`), as
    /// its command was told it: the name where the request named its pool
    /// (`slots=`), else the index.
    pub fn slot(&self) -> Option<&str> {
        let slot = self.get("slot")?;
        let named = self.get("slots").and_then(|names| {
            let i: usize = slot.parse().ok()?;
            names.split(',').nth(i)
        });
        Some(named.unwrap_or(slot))
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads a field list as [`Extras::encode`] (or a service) wrote it.
    pub fn parse(bytes: &[u8]) -> Result<FieldList, ListError> {
        if bytes.len() > MAX_LIST {
            return Err(ListError::TooLong(bytes.len()));
        }
        let mut list = FieldList::default();
        let mut rest = bytes;
        while !rest.is_empty() {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or(ListError::NotALine)?;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            let eq = line
                .iter()
                .position(|&b| b == b'=')
                .ok_or(ListError::NotALine)?;
            let (name, value) = (&line[..eq], &line[eq + 1..]);
            if name.is_empty() || !name.iter().all(u8::is_ascii_lowercase) {
                return Err(ListError::BadName);
            }
            let value = String::from_utf8(unescape(value)?).map_err(|_| ListError::NotUtf8)?;
            // The name is ASCII, checked above.
            list.push(std::str::from_utf8(name).unwrap_or_default(), &value);
        }
        Ok(list)
    }
}

/// Lines `name=value\n`, the value escaped.
impl fmt::Display for FieldList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in &self.0 {
            f.write_str(name)?;
            f.write_char('=')?;
            for c in value.chars() {
                match c {
                    '%' => f.write_str("%25")?,
                    '\n' => f.write_str("%0A")?,
                    '\r' => f.write_str("%0D")?,
                    c => f.write_char(c)?,
                }
            }
            f.write_char('\n')?;
        }
        Ok(())
    }
}

fn unescape(value: &[u8]) -> Result<Vec<u8>, ListError> {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%' {
            let hex = value.get(i + 1..i + 3).ok_or(ListError::BadEscape)?;
            let hex = std::str::from_utf8(hex).map_err(|_| ListError::BadEscape)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ListError::BadEscape)?);
            i += 3;
        } else {
            out.push(value[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Extras {
        Extras {
            note: Some("deploy 1.4.2 (% done)".into()),
            order: Some(1_733_450_000),
            newest: true,
            cancel: true,
            at_least: Some(Duration::from_secs(3000)),
            slots: vec!["db1".into(), "db-2".into(), "db.3".into()],
            group: Some((0x5eed, 3)),
        }
    }

    #[test]
    fn a_slot_is_shown_by_its_name_where_the_pool_has_names() {
        let mut f = FieldList::default();
        assert_eq!(f.slot(), None);
        f.push("slot", "1");
        assert_eq!(f.slot(), Some("1"));
        f.push("slots", "db1,db2,db3");
        assert_eq!(f.slot(), Some("db2"));
        let mut odd = FieldList::default();
        odd.push("slot", "7");
        odd.push("slots", "a,b");
        assert_eq!(odd.slot(), Some("7"));
    }

    #[test]
    fn an_empty_request_has_an_empty_list() {
        assert!(Extras::default().is_empty());
        assert_eq!(Extras::default().encode(), "");
        assert!(!full().is_empty());
    }

    #[test]
    fn the_list_is_in_the_documented_order_and_reads_back() {
        let e = full();
        e.check().unwrap();
        let text = e.encode();
        assert_eq!(
            text,
            "note=deploy 1.4.2 (%25 done)\norder=1733450000\nnewest=1\ncancel=1\n\
             atleast=3000000\nslots=db1,db-2,db.3\ngroup=5eed/3\n"
        );
        let list = FieldList::parse(text.as_bytes()).unwrap();
        assert_eq!(list.to_string(), text);
        assert_eq!(Extras::from_list(&list), e);
    }

    #[test]
    fn escapes_round_trip_and_unknown_names_are_kept() {
        let mut list = FieldList::default();
        list.push("note", "a\nb\r%c=d");
        list.push("future", "x=y%");
        let text = list.to_string();
        assert_eq!(text, "note=a%0Ab%0D%25c=d\nfuture=x=y%25\n");
        let back = FieldList::parse(text.as_bytes()).unwrap();
        assert_eq!(back, list);
        assert_eq!(back.get("future"), Some("x=y%"));
        assert_eq!(Extras::from_list(&back).note.as_deref(), Some("a\nb\r%c=d"));
    }

    #[test]
    fn limits_are_checked() {
        let with = |f: fn(&mut Extras)| {
            let mut e = Extras::default();
            f(&mut e);
            e.check()
        };
        assert_eq!(
            with(|e| e.note = Some(String::new())),
            Err(FieldError::EmptyNote)
        );
        assert_eq!(
            with(|e| e.note = Some("x".repeat(201))),
            Err(FieldError::LongNote(201))
        );
        assert!(with(|e| e.note = Some("é".repeat(100))).is_ok());
        assert_eq!(
            with(|e| e.note = Some("a\tb".into())),
            Err(FieldError::ControlInNote(9))
        );
        assert_eq!(
            with(|e| e.order = Some(u64::MAX)),
            Err(FieldError::OrderTooHigh(u64::MAX))
        );
        assert!(with(|e| e.order = Some(i64::MAX as u64)).is_ok());
        assert_eq!(
            with(|e| e.at_least = Some(MAX_AT_LEAST + Duration::from_millis(1))),
            Err(FieldError::LongAtLeast)
        );
        assert_eq!(
            with(|e| e.slots = vec!["a b".into()]),
            Err(FieldError::BadSlot("a b".into()))
        );
        assert_eq!(
            with(|e| e.slots = vec!["a".into(), "b".into(), "a".into()]),
            Err(FieldError::DuplicateSlot("a".into()))
        );
        assert_eq!(
            with(|e| e.slots = (0..65).map(|i| format!("s{i}")).collect()),
            Err(FieldError::TooManySlots(65))
        );
        // 64 names of 32 bytes: over the list's 1,024 bytes.
        assert!(matches!(
            with(|e| e.slots = (0..64).map(|i| format!("{i:032}")).collect()),
            Err(FieldError::TooLong(_))
        ));
    }

    #[test]
    fn bad_lists_are_refused() {
        for (bytes, err) in [
            (&b"note=x"[..], ListError::NotALine),
            (b"note\n", ListError::NotALine),
            (b"=x\n", ListError::BadName),
            (b"Note=x\n", ListError::BadName),
            (b"note=%4\n", ListError::BadEscape),
            (b"note=%zz\n", ListError::BadEscape),
            (b"note=%FF\n", ListError::NotUtf8),
        ] {
            assert_eq!(FieldList::parse(bytes), Err(err), "{bytes:?}");
        }
        let long = format!("note={}\n", "x".repeat(MAX_LIST));
        assert_eq!(
            FieldList::parse(long.as_bytes()),
            Err(ListError::TooLong(long.len()))
        );
        assert_eq!(FieldList::parse(b""), Ok(FieldList::default()));
    }

    #[test]
    fn a_value_that_does_not_parse_is_left_unset() {
        let list = FieldList::parse(b"order=soon\nnewest=yes\natleast=-1\n").unwrap();
        assert_eq!(Extras::from_list(&list), Extras::default());
        assert_eq!(list.get("order"), Some("soon"));
    }
}
