//! `keys --watch`: when to list, over one connection kept open (the views
//! that show the listings: `views.rs`).
//!
//! Where the service has a change feed (`Backend::change_feed`: an etcd
//! Watch, a ZooKeeper persistent watch, Redis keyspace notifications), it
//! is armed before each listing that follows a connect or a lost feed, and
//! the watch lists again only when the feed says something changed: at
//! once when the last listing is an `--interval` old, else when it is
//! (many changes, at most one listing per interval). As a safety net it
//! also lists every [`SAFETY_NET`] intervals, when a listed hold's
//! expiry (`--expire`) passes, and every interval while the listing shows
//! a hold or a waiter that the service lets run out untold
//! (`ChangeFeed::quiet_ends`: Redis's shared holds and waiters). A lost feed (connection dropped, watch
//! cancelled, compaction) is dropped: the next listing, an interval after
//! the last, arms a new one first, so a change is never missed for longer
//! than an interval. Where there is no feed, the watch lists every
//! `--interval`, as `keys` would. `-v` says which of the two it does.
//!
//! The last listing is shown again every second ([`REDRAW`]), so the
//! clock and the ages move without asking the service.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;
use wildmatch::WildMatch;

use super::sort;
use super::views::{JsonView, Plain, Screen, View};
use crate::backend::feed::{ChangeFeed, Feed};
use crate::backend::{Backend, BackendConfig, KeyInfo, LockMode, WaiterInfo};
use crate::cli::KeysOrder;
use crate::exit::ExitCode;

/// With a feed, a listing at least every this many intervals (and no more
/// often than [`SAFETY_NET_MIN`]) all the same; without one, the service is
/// asked again for a feed after this many listings (notifications turned
/// on meanwhile, a node back).
const SAFETY_NET: u32 = 30;
const SAFETY_NET_MIN: Duration = Duration::from_secs(30);

/// How often the last listing is drawn again (the clock, the ages).
const REDRAW: Duration = Duration::from_secs(1);

/// What to watch and how.
pub(super) struct Watch {
    pub pattern: Option<String>,
    pub json: bool,
    pub order: KeysOrder,
    pub waiters: bool,
    pub interval: Duration,
}

/// One look at the service: its holds and waiters, or why there are none.
pub(super) type Look = std::result::Result<(Vec<KeyInfo>, Option<Vec<WaiterInfo>>), String>;

/// The connection, its feed, and when the next listing is due.
struct Lister<'a> {
    config: &'a BackendConfig,
    watch: &'a Watch,
    glob: Option<WildMatch>,
    backend: Option<Box<dyn Backend>>,
    /// The armed feed; None before the first listing of a connection, and
    /// once lost.
    feed: Option<Box<dyn ChangeFeed>>,
    /// The backend has no feed (why), for so many listings: poll.
    polling: Option<(String, u32)>,
    /// The feed told a change not listed yet.
    changed: bool,
    /// When the last listing started.
    listed: Option<Instant>,
    /// The earliest expiry of a listed hold.
    expires: Option<SystemTime>,
    /// The last listing shows what may end without the feed telling
    /// (`ChangeFeed::quiet_ends`): list every interval.
    quiet: bool,
}

pub(super) fn run(config: &BackendConfig, watch: Watch) -> Result<ExitCode> {
    super::super::block_on(async move {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let mut resized = signal(SignalKind::window_change())?;
        let stdout = std::io::stdout();
        let mut view: Box<dyn View> = match (watch.json, stdout.is_terminal()) {
            (true, _) => Box::new(JsonView::default()),
            (false, true) => Box::new(Screen::enter()?),
            (false, false) => Box::new(Plain::default()),
        };
        let mut lister = Lister {
            config,
            watch: &watch,
            glob: watch.pattern.as_deref().map(WildMatch::new),
            backend: None,
            feed: None,
            polling: None,
            changed: false,
            listed: None,
            expires: None,
            quiet: false,
        };
        let mut redraw = tokio::time::interval(REDRAW);
        redraw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shown = config.shown();
        let mut last: Option<Look> = None;
        loop {
            let due = lister.due();
            let waits = lister.feed.is_some() && !lister.changed;
            tokio::select! {
                _ = interrupt.recv() => break,
                _ = terminate.recv() => break,
                _ = hangup.recv() => break,
                _ = resized.recv() => {
                    view.resized();
                    if let Some(look) = &last {
                        view.show(&shown, &watch, look)?;
                    }
                }
                _ = redraw.tick() => {
                    if let Some(look) = &last {
                        view.show(&shown, &watch, look)?;
                    }
                }
                told = async { lister.feed.as_mut().expect("waits").changed().await }, if waits => {
                    lister.told(told);
                }
                _ = tokio::time::sleep_until(due) => {
                    let look = lister.look().await;
                    view.show(&shown, &watch, &look)?;
                    last = Some(look);
                }
            }
        }
        lister.feed = None;
        if let Some(b) = lister.backend.take() {
            b.close().await;
        }
        view.leave()?;
        Ok(ExitCode::Success)
    })
}

impl Lister<'_> {
    /// When the next listing is due.
    fn due(&self) -> Instant {
        let Some(listed) = self.listed else {
            return Instant::now();
        };
        let interval = self.watch.interval;
        if self.feed.is_none() || self.changed || self.quiet {
            // Polling, reconnecting, re-arming, told a change, or a hold
            // or a waiter that may end untold.
            return listed + interval;
        }
        let mut due = listed + (interval * SAFETY_NET).max(SAFETY_NET_MIN);
        if let Some(at) = self.expires {
            // The service may say nothing when a hold runs out: look then
            // (a little after, so that it is gone).
            let after = at
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .saturating_add(Duration::from_millis(50));
            due = due.min((Instant::now() + after).max(listed + interval));
        }
        due
    }

    /// What the feed said.
    fn told(&mut self, told: crate::backend::Result<()>) {
        self.changed = true;
        if let Err(e) = told {
            self.feed = None;
            self.say(&format!(
                "the change feed is lost ({}): listing again",
                crate::backend::secret::scrub(&e.to_string())
            ));
        }
    }

    /// `-v`: on stderr.
    fn say(&self, what: &str) {
        if self.config.verbose {
            eprintln!("lc-cli: keys --watch on {}: {what}", self.config.shown());
        }
    }

    /// Lists over the kept connection, opening it first and arming its feed
    /// where it has one (again, after an error: the next look reconnects).
    async fn look(&mut self) -> Look {
        self.listed = Some(Instant::now());
        self.changed = false;
        let under = super::literal_prefix(self.watch.pattern.as_deref());
        let listed = self.list(under).await;
        let (mut keys, mut waiters) = match listed {
            Ok(l) => l,
            Err(e) => {
                self.feed = None;
                self.polling = None;
                if let Some(b) = self.backend.take() {
                    b.close().await;
                }
                return Err(crate::backend::secret::scrub(&e.to_string()));
            }
        };
        if let Some(glob) = &self.glob {
            keys.retain(|k| glob.matches(&k.key));
            if let Some(w) = &mut waiters {
                w.retain(|w| glob.matches(&w.key));
            }
        }
        self.expires = keys.iter().filter_map(|k| k.expires).min();
        self.quiet = self.feed.as_ref().is_some_and(|f| f.quiet_ends())
            && keys
                .iter()
                .any(|k| k.waiting > 0 || (k.kept != Some(true) && k.mode != LockMode::Exclusive));
        sort(&mut keys, self.watch.order);
        if let Some(w) = &mut waiters {
            w.sort_by(|a, b| (&a.key, a.place).cmp(&(&b.key, b.place)));
        }
        Ok((keys, waiters))
    }

    async fn list(
        &mut self,
        under: &str,
    ) -> crate::backend::Result<(Vec<KeyInfo>, Option<Vec<WaiterInfo>>)> {
        if self.backend.is_none() {
            self.backend = Some(crate::backend::connect(self.config).await?);
        }
        let b = self.backend.as_deref().expect("opened above");
        if let Some((_, n)) = &mut self.polling {
            *n += 1;
        }
        let ask = match &self.polling {
            Some((_, n)) => *n >= SAFETY_NET,
            None => self.feed.is_none(),
        };
        if ask {
            match b.change_feed(under).await? {
                Feed::Armed(feed) => {
                    self.feed = Some(feed);
                    self.polling = None;
                    self.say("waiting on the service's change feed between listings");
                }
                Feed::Poll(why) => {
                    if self.polling.as_ref().map(|(w, _)| w) != Some(&why) {
                        self.say(&format!(
                            "{why}: listing every {}",
                            humantime::format_duration(self.watch.interval)
                        ));
                    }
                    self.polling = Some((why, 0));
                }
            }
        }
        let keys = b.keys_under(under).await?;
        let waiters = match self.watch.waiters {
            true => b.waiters_under(under).await?,
            false => None,
        };
        Ok((keys, waiters))
    }
}
