//! The logs of contenders on a slot pool (tests/fleet_slots*.rs): each
//! command logs its index, `LC_SLOT`, fencing token, start and end, and the
//! checks judge them: at most one holder per slot at any instant, every
//! slot used, arrival order kept.

use std::path::Path;

/// One command's log line: its index, LC_SLOT, token, start and end (ns).
#[derive(Debug)]
pub(crate) struct Run {
    pub i: usize,
    pub slot: String,
    pub token: u64,
    pub start: u64,
    pub end: u64,
}

/// The script contender `i` runs: logs LC_SLOT and its token with its
/// start and end, holding for a second.
pub(crate) fn script(log: &str, i: usize) -> String {
    format!(
        "s=$(date +%s%N); sleep 1; e=$(date +%s%N); echo \"{i} ${{LC_SLOT:-none}} ${{LC_LOCK_TOKEN:-0}} $s $e\" >> {log}"
    )
}

/// The log's runs, in the order they were written.
pub(crate) fn runs(log: &Path) -> Vec<Run> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Run {
                i: f[0].parse().unwrap(),
                slot: f[1].to_string(),
                token: f[2].parse().unwrap(),
                start: f[3].parse().unwrap(),
                end: f[4].parse().unwrap(),
            }
        })
        .collect()
}

/// At most one holder per slot at any instant, and every slot used.
pub(crate) fn check_slots(runs: &[Run], slots: &[&str]) {
    for a in runs {
        assert!(slots.contains(&a.slot.as_str()), "unknown slot: {a:?}");
        for b in runs {
            if a.i != b.i && a.slot == b.slot {
                assert!(
                    a.end <= b.start || b.end <= a.start,
                    "two holders of slot {}: {a:?} {b:?}",
                    a.slot
                );
            }
        }
    }
    for s in slots {
        assert!(runs.iter().any(|r| r.slot == *s), "slot {s} never used");
    }
}

/// The commands started in their arrival order (contender 0 first).
pub(crate) fn check_started_in_order(runs: &[Run]) {
    let mut by_start: Vec<&Run> = runs.iter().collect();
    by_start.sort_by_key(|r| r.start);
    let order: Vec<usize> = by_start.iter().map(|r| r.i).collect();
    assert_eq!(
        order,
        (0..runs.len()).collect::<Vec<_>>(),
        "arrival order lost"
    );
}

/// The `LC_SLOT` a holder wrote to `file`, once it has.
pub(crate) fn slot_of(file: &Path) -> Option<String> {
    std::fs::read_to_string(file)
        .ok()
        .map(|s| s.trim().to_string())
}
