//! The documentation's links lead somewhere: every relative link in README.md, CHANGELOG.md and
//! docs/*.md names a file or directory of the repository, and a `#anchor` on a Markdown file
//! names one of its headings (GitHub's slugs). No network: links with a scheme (`https:`) are
//! left alone. `cargo xtask test` runs this first, before anything is built.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A link that leads nowhere.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// The Markdown file, relative to the repository.
    pub file: PathBuf,
    /// 1-based line of the link's target.
    pub line: usize,
    /// The target as written.
    pub target: String,
    /// What is wrong with it.
    pub why: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: ({}) {}",
            self.file.display(),
            self.line,
            self.target,
            self.why
        )
    }
}

/// The repository this xtask belongs to.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repository")
        .to_owned()
}

/// The Markdown files whose links are checked: README.md, CHANGELOG.md and docs/*.md.
fn documents(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = ["README.md", "CHANGELOG.md"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.is_file())
        .collect();
    let docs = root.join("docs");
    if docs.is_dir() {
        let mut pages: Vec<PathBuf> = std::fs::read_dir(&docs)
            .with_context(|| format!("reading {}", docs.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        pages.sort();
        files.extend(pages);
    }
    Ok(files)
}

/// Checks every link of the documents under `root`.
pub fn check(root: &Path) -> Result<Vec<Broken>> {
    let root = root
        .canonicalize()
        .with_context(|| format!("{}", root.display()))?;
    let mut anchors: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    for file in documents(&root)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let dir = file.parent().expect("a file has a directory").to_owned();
        for (line, target) in links(&text) {
            let mut report = |why: String| {
                broken.push(Broken {
                    file: file.strip_prefix(&root).unwrap_or(&file).to_owned(),
                    line,
                    target: target.clone(),
                    why,
                })
            };
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else if path.starts_with('/') {
                report("an absolute path: link relative to this file".to_owned());
                continue;
            } else {
                normalize(&dir.join(path))
            };
            if !resolved.starts_with(&root) {
                report("leads outside the repository".to_owned());
                continue;
            }
            if !resolved.exists() {
                report(format!(
                    "no such file or directory: {}",
                    resolved.strip_prefix(&root).unwrap_or(&resolved).display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_none_or(|x| x != "md") {
                continue; // an anchor into source code (`#L10`) is GitHub's business
            }
            if !anchors.contains_key(&resolved) {
                let text = std::fs::read_to_string(&resolved)
                    .with_context(|| format!("reading {}", resolved.display()))?;
                anchors.insert(resolved.clone(), heading_slugs(&text));
            }
            if !anchors[&resolved].contains(anchor) {
                report(format!("no heading with the anchor #{anchor}"));
            }
        }
    }
    Ok(broken)
}

/// `cargo xtask test`'s `links` step: fails with one line per broken link.
pub fn run() -> Result<()> {
    let root = repository();
    let broken = check(&root)?;
    let files = documents(&root)?.len();
    if broken.is_empty() {
        println!("links: every relative link of {files} Markdown files resolves");
        return Ok(());
    }
    for b in &broken {
        eprintln!("{b}");
    }
    bail!("{} broken link(s) in the documentation", broken.len())
}

/// `path` with `.` and `..` resolved lexically (the files need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The lines of `text` outside fenced code blocks (``` or ~~~), with their indexes; the fences
/// themselves are left out.
fn outside_code_blocks(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fence: Option<&str> = None;
    text.lines().enumerate().filter(move |(_, line)| {
        let trimmed = line.trim_start();
        if let Some(f) = fence {
            if trimmed.starts_with(f) {
                fence = None;
            }
            return false;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            return false;
        }
        true
    })
}

/// The targets of the inline links, images and reference definitions in `text`, with their
/// line numbers, outside code blocks and code spans, without those that have a scheme.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in outside_code_blocks(text) {
        let line = without_code_spans(line);
        let mut targets = Vec::new();
        // A reference definition: `[name]: target`.
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            if let Some((_, after)) = rest.split_once("]:") {
                if let Some(target) = after.split_whitespace().next() {
                    targets.push(target.to_owned());
                }
            }
        }
        // Inline links and images: `](target)` or `](target "title")`.
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let inside = rest[..end].trim();
            let target = inside.split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            targets.push(target.to_owned());
            rest = &rest[end..];
        }
        for target in targets {
            if !target.is_empty() && !has_scheme(&target) {
                out.push((i + 1, target));
            }
        }
    }
    out
}

/// Whether a link target starts with a URL scheme (`https:`, `mailto:`).
fn has_scheme(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// `line` with the contents of its code spans (`` `like this` ``) removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        let fence = "`".repeat(ticks);
        match find_run(after, &fence) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                // An unclosed run is literal text.
                out.push_str(&rest[start..start + ticks]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where in `text` a run of exactly `run.len()` backticks starts.
fn find_run(text: &str, run: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(run) {
        let at = from + at;
        let len = text[at..].chars().take_while(|&c| c == '`').count();
        if len == run.len() {
            return Some(at);
        }
        from = at + len;
    }
    None
}

/// The anchors GitHub gives the ATX headings of `text` (outside code blocks).
fn heading_slugs(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in outside_code_blocks(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// GitHub's anchor for a heading: the rendered text (code spans and emphasis marks dropped,
/// links reduced to their text), lower case, without punctuation but `-` and `_`, spaces as `-`.
fn slug(heading: &str) -> String {
    // Links: `[text](target)` renders as `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](") {
            Some(mid) => {
                let close = rest[open + mid..].find(')').map(|c| open + mid + c);
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + mid]);
                rest = match close {
                    Some(c) => &rest[c + 1..],
                    None => "",
                };
            }
            None => {
                text.push_str(&rest[..=open]);
                rest = &rest[open + 1..];
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(
            slug("Watching the gateway: Prometheus, DPDK telemetry, a figure"),
            "watching-the-gateway-prometheus-dpdk-telemetry-a-figure"
        );
        assert_eq!(
            slug("Replay: what would PacketExpress do to my traffic?"),
            "replay-what-would-packetexpress-do-to-my-traffic"
        );
        assert_eq!(
            slug("`[ports.external]`, `[ports.internal]`"),
            "portsexternal-portsinternal"
        );
        assert_eq!(
            slug("The `dpdk` crate in one example"),
            "the-dpdk-crate-in-one-example"
        );
        assert_eq!(
            slug("RX queues, rules and hairpin (§4.2–§4.4)"),
            "rx-queues-rules-and-hairpin-4244"
        );
        assert_eq!(slug("See [the page](x.md) now"), "see-the-page-now");
        assert_eq!(slug("rx_meta and tx"), "rx_meta-and-tx");
        let slugs = heading_slugs("# A\n## Notes\n```text\n# not a heading\n```\n### Notes\n");
        assert_eq!(
            slugs,
            ["a", "notes", "notes-1"]
                .map(str::to_owned)
                .into_iter()
                .collect()
        );
    }

    #[test]
    fn links_outside_code_are_found_with_their_lines() {
        let text = "see [a](a.md) and `[b](b.md)`\n```sh\n[c](c.md)\n```\n\
                    ![fig\n](img.svg \"title\") and [web](https://example.org)\n[d]: d.md#x\n";
        assert_eq!(
            links(text),
            vec![
                (1, "a.md".to_owned()),
                (6, "img.svg".to_owned()),
                (7, "d.md#x".to_owned())
            ]
        );
    }

    /// A repository of three files: good links pass, and each kind of broken one is named.
    #[test]
    fn broken_links_and_anchors_are_reported() {
        let root = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(
            root.join("README.md"),
            "# Top\n[ok](docs/page.md#a-section) [ok](src/lib.rs#L1) [ok](#top) [ok](src)\n\
             [gone](docs/missing.md) [bad anchor](docs/page.md#no-such)\n\
             [out](../elsewhere.md) [self](#nowhere)\n",
        )
        .unwrap();
        std::fs::write(
            root.join("docs/page.md"),
            "# Page\n## A section\n[back](../README.md#top) [up](../src/lib.rs)\n",
        )
        .unwrap();
        let broken = check(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let found: Vec<(usize, &str)> =
            broken.iter().map(|b| (b.line, b.target.as_str())).collect();
        assert_eq!(
            found,
            [
                (3, "docs/missing.md"),
                (3, "docs/page.md#no-such"),
                (4, "../elsewhere.md"),
                (4, "#nowhere")
            ],
            "{broken:#?}"
        );
        assert!(broken.iter().all(|b| b.file == Path::new("README.md")));
    }

    /// The repository's own documentation: the check `cargo xtask test` runs, here in
    /// `cargo test` too.
    #[test]
    fn the_repositorys_links_resolve() {
        let broken = check(&repository()).unwrap();
        let lines: Vec<String> = broken.iter().map(ToString::to_string).collect();
        assert!(broken.is_empty(), "broken links:\n{}", lines.join("\n"));
    }
}
