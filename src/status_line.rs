//! The one-line status shown while waiting for a lock, when stderr is a
//! terminal: redrawn in place, erased once the wait is over.

use std::io::Write;
use std::time::Duration;

use crate::terminal;

pub(crate) struct StatusLine {
    enabled: bool,
    drawn: bool,
}

impl StatusLine {
    /// Draws only when stderr is a terminal.
    pub(crate) fn new() -> Self {
        StatusLine {
            enabled: terminal::stderr_is_terminal(),
            drawn: false,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// `lc-cli: waiting for 'KEY' on SERVER: 12s, 3 ahead (held by 'ci-7' for 3m05s)`
    pub(crate) fn waiting(
        &mut self,
        key: &str,
        server: &str,
        waited: Duration,
        ahead: Option<usize>,
        holder: Option<&str>,
    ) {
        let mut text = format!(
            "lc-cli: waiting for '{key}' on {server}: {}",
            format_waited(waited)
        );
        match ahead {
            Some(0) => text.push_str(", next in line"),
            Some(n) => text.push_str(&format!(", {n} ahead")),
            None => {}
        }
        if let Some(holder) = holder {
            text.push_str(&format!(" ({holder})"));
        }
        self.draw(&text);
    }

    fn draw(&mut self, text: &str) {
        if !self.enabled || !terminal::stderr_is_foreground() {
            return;
        }
        // Never wider than the terminal: a wrapped line could not be erased.
        let width = terminal::stderr_width().unwrap_or(80).saturating_sub(1);
        let shown: String = text.chars().take(width).collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{shown}");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Erases the line, leaving the cursor where it was before.
    pub(crate) fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Default for StatusLine {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `7s`, `2m05s`, `1h02m`.
pub(crate) fn format_waited(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waited_is_short_and_readable() {
        assert_eq!(format_waited(Duration::from_millis(7400)), "7s");
        assert_eq!(format_waited(Duration::from_secs(125)), "2m05s");
        assert_eq!(format_waited(Duration::from_secs(3720)), "1h02m");
    }
}
