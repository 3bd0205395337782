//! `--slots a,b,c` and `LC_SLOT` (docs/fleet-slots.md): which slot of a
//! `--limit N` set a holder got, told to its command as the slot's index
//! (0 to N-1) or, in a named pool, its name.

use anyhow::Result;

use crate::backend::fields::Extras;
use crate::backend::BackendConfig;
use crate::cli::ModeArgs;
use crate::exit::{fail, ExitCode};

/// The named pool of a request, checked: `--slots` implies `--limit` with
/// the count of names; a `--limit` that differs is a usage error (64).
pub(super) fn names(mode: &ModeArgs, key: &str) -> Result<Vec<String>> {
    if mode.slots.is_empty() {
        return Ok(Vec::new());
    }
    let usage = |what: String| Err(fail(ExitCode::Usage, format!("'{key}': {what}")));
    let check = Extras {
        slots: mode.slots.clone(),
        ..Extras::default()
    };
    if let Err(e) = check.check() {
        return usage(e.to_string());
    }
    match mode.limit {
        Some(n) if n as usize != mode.slots.len() => usage(format!(
            "--slots names {} slots but --limit says {n}: leave out --limit (--slots implies it)",
            mode.slots.len()
        )),
        _ => Ok(mode.slots.clone()),
    }
}

/// `--slots` where the backend cannot yet tell a holder its slot: refused at
/// once with one line (76), before anything is sent, rather than run a
/// command that expects `LC_SLOT` without it. `--limit N` alone still runs
/// there (its command then has no `LC_SLOT`, docs/fleet-slots.md).
pub(super) fn check(config: &BackendConfig, key: &str, names: &[String]) -> Result<()> {
    let scheme = config.server.scheme();
    let service = scheme.service;
    let Some(why) = scheme.caps.slots.filter(|_| !names.is_empty()) else {
        return Ok(());
    };
    Err(fail(
        ExitCode::Protocol,
        format!(
            "lock '{key}' on {}: lc-cli's {service} backend cannot take --slots: {why}",
            config.server
        ),
    ))
}

/// Why a grant of a named pool cannot run its command: the service did
/// not say which slot it gave (an `lc-cli serve` from before slots names
/// no feature `slots`), where the pool has more than one (a pool of one
/// is an exclusive lock: its slot is the one). None: it may run.
pub(super) fn untold(slot: Option<u32>, names: &[String]) -> Option<String> {
    (slot.is_none() && names.len() > 1).then(|| {
        "cannot take --slots: the service did not say which slot it granted (an lc-cli serve from before slots; the hold was given back, the command did not run)".to_string()
    })
}

/// The command's `LC_SLOT`, from the slot the grant gave (its index):
/// the name of a named pool, else the index. A pool of one name is an
/// exclusive lock, whose one holder has slot 0.
pub(super) fn env(slot: Option<u32>, names: &[String]) -> Option<(String, String)> {
    let i = slot.or((names.len() == 1).then_some(0))?;
    let value = match names.get(i as usize) {
        Some(name) => name.clone(),
        None if names.is_empty() => i.to_string(),
        // A grant beyond the pool cannot be (its N is the count): no name.
        None => return None,
    };
    Some(("LC_SLOT".to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_or_name() {
        let names = vec!["db1".to_string(), "db2".to_string()];
        assert_eq!(env(Some(1), &names), Some(("LC_SLOT".into(), "db2".into())));
        assert_eq!(env(Some(2), &[]), Some(("LC_SLOT".into(), "2".into())));
        assert_eq!(env(None, &names), None);
        assert_eq!(env(Some(5), &names), None);
        let one = vec!["only".to_string()];
        assert_eq!(env(None, &one), Some(("LC_SLOT".into(), "only".into())));
        assert!(untold(None, &names).is_some());
        assert_eq!(untold(None, &one), None);
        assert_eq!(untold(Some(0), &names), None);
        assert_eq!(untold(None, &[]), None);
    }
}
