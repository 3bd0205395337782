//! The partition trial the backends' fault tests share: a holder whose TCP
//! path goes through a [`Proxy`] that freezes (no bytes, connections left
//! open) while a waiter keeps a direct path. The holder's command must have
//! ended before the service can give the key away and the waiter's command
//! starts: checked from the commands' own logged times.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::proxy::Proxy;
use super::redis::Running;
use super::timeline::{gone_at, now_ns, OnTerm, Timeline};
use super::wait_until;

const LIMIT: Duration = Duration::from_secs(40);

/// Times after the freeze, in ms: the holder's command gone, the waiter's
/// command started.
#[derive(Debug)]
pub(crate) struct Trial {
    pub holder_gone: f64,
    pub waiter_start: f64,
}

/// One trial. `holder(script)` must reach the service through `proxy`,
/// `waiter(script)` directly; `queued()` says when the waiter is in line.
/// Both lc-cli runs are checked: the holder exits 75 saying it lost the
/// lock, the waiter 0.
pub(crate) fn trial(
    proxy: &Proxy,
    on_term: OnTerm,
    holder: impl FnOnce(&str) -> Command,
    waiter: impl FnOnce(&str) -> Command,
    queued: impl Fn() -> bool,
) -> Trial {
    let tmp = tempfile::tempdir().unwrap();
    let tl = Timeline::new(tmp.path());
    let holder = Running::spawn(holder(&tl.holder("holder", on_term)).stdin(Stdio::null()));
    assert!(
        wait_until(LIMIT, || tl.start_of("holder").is_some()),
        "the holder's command never started"
    );
    let (_, holder_pid) = tl.start_of("holder").unwrap();
    let waiter = Running::spawn(waiter(&tl.one_shot("waiter")).stdin(Stdio::null()));
    assert!(wait_until(LIMIT, queued), "the waiter never queued");
    let frozen_at = now_ns();
    proxy.freeze();
    let gone = gone_at(holder_pid, LIMIT).expect("the holder's command never ended");
    assert!(
        wait_until(LIMIT, || tl.start_of("waiter").is_some()),
        "the waiter never got the key:\n{}",
        tl.text()
    );
    let (waiter_start, _) = tl.start_of("waiter").unwrap();
    if on_term != OnTerm::Ignore {
        assert!(tl.end_of("holder").is_some(), "no SIGTERM:\n{}", tl.text());
    }
    let (code, err) = holder.finish(LIMIT);
    assert_eq!(code, 75, "holder: {err}");
    assert!(err.contains("lost the lock"), "holder: {err}");
    let (code, err) = waiter.finish(LIMIT);
    assert_eq!(code, 0, "waiter: {err}");
    let ms = |t: i128| (t - frozen_at) as f64 / 1e6;
    Trial {
        holder_gone: ms(gone),
        waiter_start: ms(waiter_start),
    }
}

/// Runs `trial(n, kind)` for every kind at once (each on keys and a proxy
/// of its own), prints every margin, then fails if two commands overlapped
/// in any of them. `label` names the setting, as `session 4s`.
pub(crate) fn trials(label: &str, kinds: &[OnTerm], trial: impl Fn(usize, OnTerm) -> Trial + Sync) {
    let trials: Vec<(OnTerm, Trial)> = std::thread::scope(|s| {
        let handles: Vec<_> = kinds
            .iter()
            .enumerate()
            .map(|(n, &kind)| {
                let trial = &trial;
                s.spawn(move || (kind, trial(n, kind)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (kind, t) in &trials {
        eprintln!(
            "{label}, command {kind:?}: holder's command gone {:.0} ms after the freeze, waiter's started at {:.0} ms: margin {:.0} ms",
            t.holder_gone,
            t.waiter_start,
            t.waiter_start - t.holder_gone
        );
    }
    for (kind, t) in &trials {
        assert!(
            t.holder_gone < t.waiter_start,
            "{label}, {kind:?}: two commands ran at once for {:.0} ms ({t:?})",
            t.holder_gone - t.waiter_start
        );
    }
}
