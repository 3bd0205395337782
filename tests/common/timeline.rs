//! What the commands of a fault test did and when, from their own words:
//! each appends `NAME start NS PID` / `NAME end NS` (`date +%s%N`) to one
//! file, so "never two holders" is checked on the wall clock the commands
//! themselves read, not on what lc-cli says.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) struct Timeline {
    pub path: PathBuf,
}

/// What a holder's command does on SIGTERM.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OnTerm {
    /// Logs its end and exits.
    LogAndExit,
    /// Cleans up for half a second, then logs its end and exits.
    SlowExit,
    /// Ignores it (and so do its children): only SIGKILL ends it.
    Ignore,
    /// Logs `NAME term NS PID` and goes on (its `sleep` dies of it, the
    /// loop starts the next): only SIGKILL ends it.
    LogAndGoOn,
    /// Cleans up for this many seconds, then logs its end and exits.
    CleansUpFor(Duration),
}

/// Nanoseconds since the epoch, the clock `date +%s%N` reads.
pub(crate) fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// The process exists and is not a zombie.
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Polls every 2 ms (at most `limit`) until `pid` is gone; when it was
/// first seen gone (an upper bound of its end), or None.
pub(crate) fn gone_at(pid: i32, limit: Duration) -> Option<i128> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return Some(now_ns());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// Polls every 2 ms (at most `limit`) until `pid` is gone; the last time it
/// was seen alive (a lower bound of its end: a start before it is proof of
/// an overlap, whatever the polling's delays), or None.
pub(crate) fn last_seen_alive(pid: i32, limit: Duration) -> Option<i128> {
    let start = Instant::now();
    let mut seen = None;
    while start.elapsed() < limit {
        let at = now_ns();
        if !alive(pid) {
            return seen;
        }
        seen = Some(at);
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

impl Timeline {
    pub(crate) fn new(dir: &Path) -> Timeline {
        Timeline {
            path: dir.join("timeline"),
        }
    }

    fn log(&self, name: &str, what: &str) -> String {
        format!(
            "echo \"{name} {what} $(date +%s%N) $$\" >> {}",
            self.path.display()
        )
    }

    /// A `-c` script that logs its start, then runs until stopped.
    pub(crate) fn holder(&self, name: &str, on_term: OnTerm) -> String {
        let trap = match on_term {
            OnTerm::LogAndExit => format!("trap '{}; exit 0' TERM", self.log(name, "end")),
            OnTerm::SlowExit => format!("trap 'sleep 0.5; {}; exit 0' TERM", self.log(name, "end")),
            OnTerm::Ignore => "trap '' TERM".to_string(),
            OnTerm::LogAndGoOn => format!("trap '{}' TERM", self.log(name, "term")),
            OnTerm::CleansUpFor(d) => format!(
                "trap 'sleep {}; {}; exit 0' TERM",
                d.as_secs_f64(),
                self.log(name, "end")
            ),
        };
        format!(
            "{trap}; {}; while :; do sleep 0.05; done",
            self.log(name, "start")
        )
    }

    /// A `-c` script that logs its start and ends.
    pub(crate) fn one_shot(&self, name: &str) -> String {
        self.log(name, "start")
    }

    fn find(&self, name: &str, what: &str) -> Option<(i128, i32)> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[0] == name && f[1] == what)
                .then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
        })
    }

    /// (ns, pid) of NAME's start, once logged.
    pub(crate) fn start_of(&self, name: &str) -> Option<(i128, i32)> {
        self.find(name, "start")
    }

    /// When NAME logged a SIGTERM ([`OnTerm::LogAndGoOn`]).
    pub(crate) fn term_of(&self, name: &str) -> Option<i128> {
        self.find(name, "term").map(|(t, _)| t)
    }

    pub(crate) fn end_of(&self, name: &str) -> Option<i128> {
        self.find(name, "end").map(|(t, _)| t)
    }

    pub(crate) fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}
