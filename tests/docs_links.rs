//! The documentation's links resolve: every relative Markdown link in
//! README.md, docs/**/*.md, CONTRIBUTING.md and BENCHMARKS.md names a file
//! that exists, every `#anchor` a heading of its target (GitHub's anchor
//! rules), and every page of docs/ can be reached from the README.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, BENCHMARKS.md, CONTRIBUTING.md (once someone writes it) and
/// every .md under docs/, relative to the repository's root.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    if root().join("CONTRIBUTING.md").exists() {
        pages.push(PathBuf::from("CONTRIBUTING.md"));
    }
    pages.extend(docs_pages());
    pages
}

fn docs_pages() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(root().join(&dir)).expect("docs/ exists") {
            let name = entry.unwrap().file_name();
            let rel = dir.join(&name);
            if root().join(&rel).is_dir() {
                dirs.push(rel);
            } else if rel.extension().is_some_and(|e| e == "md") {
                found.push(rel);
            }
        }
    }
    found.sort();
    found
}

/// The text outside fenced and indented code blocks, with inline code spans
/// replaced by a word (a link's text may be code; a link inside code is not
/// a link). Line breaks are kept, so a link's text may span lines.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    let mut prev_blank = true;
    let mut in_indented = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        let blank = line.trim().is_empty();
        in_indented = line.starts_with("    ") && (prev_blank || in_indented);
        prev_blank = blank;
        if fenced || in_indented {
            out.push('\n');
            continue;
        }
        let mut parts = line.split('`');
        out.push_str(parts.next().unwrap_or(""));
        for (i, part) in parts.enumerate() {
            // Odd pieces are inside a code span.
            out.push_str(if i % 2 == 0 { "code" } else { part });
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links `[text](target)` and the reference
/// definitions `[label]: target` in `text`.
fn links(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        found.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(close) = line.find("]: ") {
            if line.starts_with('[') && !line[..close].contains(']') {
                found.push(line[close + 3..].trim().to_string());
            }
        }
    }
    found
}

/// GitHub's anchor for a heading: its text lowercased, spaces to '-',
/// punctuation other than '-' and '_' dropped; a repeated anchor gets -1, -2.
fn slug(heading: &str) -> String {
    // A link in a heading anchors on its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](") {
            Some(mid) if rest[open + mid..].contains(')') => {
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + mid]);
                let close = rest[open + mid..].find(')').unwrap() + open + mid;
                rest = &rest[close + 1..];
            }
            _ => break,
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(line[hashes..].trim().trim_end_matches('#'));
            let n = seen.entry(base.clone()).or_insert(0);
            found.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
    }
    found
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// `target` as seen from `page`, relative to the root, `..` resolved.
fn resolve(page: &Path, target: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in page.parent().unwrap().join(target).components() {
        match part {
            Component::ParentDir => {
                assert!(
                    out.pop(),
                    "{target} in {} leaves the repository",
                    page.display()
                );
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn read(page: &Path) -> String {
    std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

/// Every broken link of `page`, as "page: target (why)".
fn broken_links(page: &Path) -> Vec<String> {
    check(page, &read(page))
}

/// The broken links of `text`, read as the page `page`.
fn check(page: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for target in links(text) {
        if target.is_empty() || is_external(&target) {
            if target.is_empty() {
                broken.push(format!("{}: an empty link", page.display()));
            }
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            resolve(page, path)
        };
        if path.is_empty() {
            // An anchor in the page itself.
            if !anchors(text).contains(anchor.unwrap_or_default()) {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
            continue;
        }
        if !root().join(&file).exists() {
            broken.push(format!(
                "{}: {target} (no file {})",
                page.display(),
                file.display()
            ));
            continue;
        }
        if let Some(anchor) = anchor {
            if file.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&file)).contains(anchor)
            {
                broken.push(format!(
                    "{}: {target} (no heading #{anchor} in {})",
                    page.display(),
                    file.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_link_resolves() {
    let pages = pages();
    assert!(pages.len() >= 10, "{pages:?}");
    let broken: Vec<String> = pages.iter().flat_map(|p| broken_links(p)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_docs_page_is_reachable_from_the_readme() {
    let start = PathBuf::from("README.md");
    let mut reached = BTreeSet::from([start.clone()]);
    let mut todo = VecDeque::from([start]);
    while let Some(page) = todo.pop_front() {
        for target in links(&read(&page)) {
            let path = target.split('#').next().unwrap();
            if path.is_empty() || is_external(path) || !path.ends_with(".md") {
                continue;
            }
            let file = resolve(&page, path);
            if root().join(&file).exists() && reached.insert(file.clone()) {
                todo.push_back(file);
            }
        }
    }
    let unreached: Vec<_> = docs_pages()
        .into_iter()
        .filter(|p| !reached.contains(p))
        .collect();
    assert!(
        unreached.is_empty(),
        "not linked from the README or a page it links: {unreached:?}"
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(slug("Exit status"), "exit-status");
    assert_eq!(slug("Shared locks and limits"), "shared-locks-and-limits");
    assert_eq!(
        slug("A `--server` that is not a lock server"),
        "a---server-that-is-not-a-lock-server"
    );
    assert_eq!(slug("`LC_LOCK_TOKEN`"), "lc_lock_token");
    assert_eq!(
        slug("Withdrawals, shutdown, the manager port"),
        "withdrawals-shutdown-the-manager-port"
    );
    assert_eq!(
        slug("Session holds (actions 8 to 11)"),
        "session-holds-actions-8-to-11"
    );
    assert_eq!(slug("See [the server](server.md)"), "see-the-server");
    let doc = "# Title\n\n## Notes\n\ntext\n\n## Notes\n\n```\n# not a heading\n```\n";
    assert_eq!(
        anchors(doc),
        BTreeSet::from(["title".into(), "notes".into(), "notes-1".into()])
    );
}

#[test]
fn links_in_code_are_not_links() {
    let doc = "See [a](a.md) and [`b`](b.md#x),\n[two\nlines](c.md).\n\n    [code](no.md)\n\n\
               `[span](no.md)` and [ref]: d.md\n\n```\n[fenced](no.md)\n```\n[e]: e.md\n";
    assert_eq!(links(doc), ["a.md", "b.md#x", "c.md", "e.md"]);
}

#[test]
fn a_missing_file_or_heading_is_caught() {
    let page = Path::new("docs/backends/example.md");
    let text =
        "# Here\n\n[ok](../../README.md#exit-status), [ok](#here), [ok](https://x.org/y.md),\n\
                [bad](../../README.md#no-such-heading), [bad](../missing.md), [bad](#nowhere)\n";
    let broken = check(page, text);
    assert_eq!(broken.len(), 3, "{broken:?}");
    assert!(
        broken[0].contains("no heading #no-such-heading in README.md"),
        "{broken:?}"
    );
    assert!(broken[1].contains("no file docs/missing.md"), "{broken:?}");
    assert!(broken[2].contains("#nowhere"), "{broken:?}");
}
