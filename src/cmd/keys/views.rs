//! The views of `keys --watch` (`watch.rs` decides when to list): the
//! full-screen one at a terminal (the alternate screen, only the changed
//! lines rewritten: no flicker; Ctrl-C, SIGTERM or SIGHUP put the screen
//! back as it was), the plain one elsewhere (the whole table again when it
//! changes) and the JSON one (`events.rs`). Each is shown the last look
//! every second, so the clock and the ages move without asking the
//! service.

use std::io::Write;
use std::time::SystemTime;

use anyhow::Result;

use super::events::Diff;
use super::watch::{Look, Watch};
use super::{as_table, waiters_table};

/// Where the looks go.
pub(super) trait View {
    fn show(&mut self, server: &str, watch: &Watch, look: &Look) -> Result<()>;
    fn resized(&mut self) {}
    fn leave(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The text of a look: a header line, then the tables.
fn frame(server: &str, watch: &Watch, look: &Look, now: SystemTime) -> Vec<String> {
    let clock = humantime::format_rfc3339_seconds(now).to_string();
    let every = humantime::format_duration(watch.interval);
    let mut lines = vec![format!(
        "lc-cli keys --watch on {server}, every {every}; Ctrl-C to quit    {clock}"
    )];
    match look {
        Err(e) => {
            lines.push(String::new());
            lines.push(format!(
                "cannot list the keys: {e} (trying again every {every})"
            ));
        }
        Ok((keys, waiters)) => {
            lines.push(String::new());
            if keys.is_empty() {
                lines.push("no key is held".to_string());
            } else {
                lines.extend(as_table(keys, now).lines().map(str::to_string));
            }
            match waiters {
                Some(w) if !w.is_empty() => {
                    lines.push(String::new());
                    lines.extend(waiters_table(w, now).lines().map(str::to_string));
                }
                None if watch.waiters => {
                    lines.push(String::new());
                    lines.push("(this service does not say who waits, only how many)".into());
                }
                _ => {}
            }
        }
    }
    lines
}

/// The full-screen view: the alternate screen, only changed lines redrawn.
pub(super) struct Screen {
    shown: Vec<String>,
    left: bool,
}

impl Screen {
    pub(super) fn enter() -> Result<Screen> {
        // The alternate screen, the cursor hidden, the screen cleared.
        put("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J")?;
        Ok(Screen {
            shown: Vec::new(),
            left: false,
        })
    }
}

impl View for Screen {
    fn show(&mut self, server: &str, watch: &Watch, look: &Look) -> Result<()> {
        let (cols, rows) = terminal_size();
        let mut lines: Vec<String> = frame(server, watch, look, SystemTime::now())
            .into_iter()
            .map(|l| fit(&l, cols))
            .collect();
        if lines.len() > rows {
            let more = lines.len() - rows + 1;
            lines.truncate(rows - 1);
            lines.push(fit(&format!("... {more} more lines"), cols));
        }
        let mut out = String::new();
        for (row, line) in lines.iter().enumerate() {
            if self.shown.get(row) != Some(line) {
                out.push_str(&format!("\x1b[{};1H{line}\x1b[K", row + 1));
            }
        }
        if lines.len() < self.shown.len() {
            // Clears what the last frame had below this one.
            out.push_str(&format!("\x1b[{};1H\x1b[J", lines.len() + 1));
        }
        self.shown = lines;
        put(&out)
    }

    fn resized(&mut self) {
        // Everything is drawn again at the next look.
        self.shown.clear();
        let _ = put("\x1b[H\x1b[2J");
    }

    fn leave(&mut self) -> Result<()> {
        self.left = true;
        put("\x1b[?25h\x1b[?1049l")
    }
}

impl Drop for Screen {
    /// An error (or a panic) on the way out still gives the screen back.
    fn drop(&mut self) {
        if !self.left {
            let _ = put("\x1b[?25h\x1b[?1049l");
        }
    }
}

fn put(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// At most `cols` characters, so that no line wraps (a wrapped line would
/// move every row below it).
fn fit(line: &str, cols: usize) -> String {
    line.chars().take(cols).collect()
}

/// The terminal's columns and rows (80x24 when it does not say).
fn terminal_size() -> (usize, usize) {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which
    // points to a live, properly aligned `winsize` of ours; stdout's
    // descriptor stays open for the call (a bad one only makes it fail).
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    match ok && size.ws_col > 0 && size.ws_row > 1 {
        true => (size.ws_col.into(), size.ws_row.into()),
        false => (80, 24),
    }
}

/// Not a terminal: the whole frame again whenever the tables change (the
/// header's clock and the HELD/WAITED ages aside, which change every
/// second).
#[derive(Default)]
pub(super) struct Plain {
    last: Option<String>,
}

impl View for Plain {
    fn show(&mut self, server: &str, watch: &Watch, look: &Look) -> Result<()> {
        let now = SystemTime::now();
        // Compared without the ages: the same holds at a later second.
        let same = match look {
            Ok((k, w)) => Diff::identity(k, w.as_deref()),
            Err(e) => e.clone(),
        };
        if self.last.as_ref() == Some(&same) {
            return Ok(());
        }
        self.last = Some(same);
        let mut text = frame(server, watch, look, now).join("\n");
        text.push_str("\n\n");
        put(&text)
    }
}

/// `--json`: the events of each change, one object per line.
#[derive(Default)]
pub(super) struct JsonView {
    diff: Diff,
}

impl View for JsonView {
    fn show(&mut self, _server: &str, _watch: &Watch, look: &Look) -> Result<()> {
        let text = self.diff.next(look, SystemTime::now());
        if text.is_empty() {
            return Ok(());
        }
        put(&text)
    }
}
