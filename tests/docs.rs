//! Keeps the documentation honest: every relative link in the README, ARCHITECTURE.md
//! and `docs/` reaches a file and a heading that exist, every code link of
//! ARCHITECTURE.md names an item its file defines, and the reference pages name every
//! configuration key, every metric, every route and every refusal reason segmint has.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown files whose links are checked.
fn pages() -> Vec<PathBuf> {
    let top = [
        "README.md",
        "ARCHITECTURE.md",
        "RELIABILITY.md",
        "grafana/README.md",
    ];
    let mut pages: Vec<PathBuf> = top.iter().map(|p| root().join(p)).collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(
        docs.len() >= 5,
        "the reference pages are in docs/: {docs:?}"
    );
    pages.extend(docs);
    pages
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of a page outside its code blocks: only they hold headings and links.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut in_code = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            return false;
        }
        !in_code
    })
}

/// The anchors a page defines: its headings and its `<a id="…">` tags.
fn anchors(text: &str) -> HashSet<String> {
    let mut found = HashSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            found.insert(slug(&line[hashes..]));
        }
        let mut rest = line;
        while let Some(at) = rest.find("<a id=\"") {
            let tail = &rest[at + 7..];
            let end = tail.find('"').unwrap_or(tail.len());
            found.insert(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    found
}

/// The targets of the Markdown links `[text](target)` of a page, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            found.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    found
}

#[test]
fn every_relative_link_reaches_a_file_and_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = match file {
                "" => page.clone(),
                file => page.parent().unwrap().join(file),
            };
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if let Some(anchor) = anchor
                && !anchors(&read(&path)).contains(anchor)
            {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(checked > 50, "links were found ({checked})");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The code links of a page, outside code blocks: `[`name`](path.rs)`, whose text is an
/// item name in backticks (`Type::method` or a bare name) and whose target is a
/// relative path to a Rust file. Returns `(name, target)`.
fn code_links(text: &str) -> Vec<(String, String)> {
    let is_item = |name: &str| {
        name.split("::").all(|part| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("[`") {
            let tail = &rest[at + 2..];
            let Some(close) = tail.find("`](") else { break };
            let (name, after) = (&tail[..close], &tail[close + 3..]);
            let end = after.find(')').unwrap_or(after.len());
            let target = &after[..end];
            if is_item(name) && target.ends_with(".rs") && !target.contains("://") {
                found.push((name.to_owned(), target.to_owned()));
            }
            rest = &after[end..];
        }
    }
    found
}

/// The items a bare name in a code link may be.
const ITEM_KINDS: [&str; 7] = ["fn", "struct", "enum", "trait", "const", "mod", "type"];

/// Whether `source` defines what a code link names: `fn method` for `Type::method` (or
/// `module::function`); for a bare name a function, struct, enum, trait, constant,
/// module or type alias of that name. Whole words only: `fn raise` is not
/// `fn raise_database`.
fn defines(source: &str, name: &str) -> bool {
    let (item, kinds): (&str, &[&str]) = match name.rsplit_once("::") {
        Some((_, method)) => (method, &["fn"]),
        None => (name, &ITEM_KINDS),
    };
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    kinds.iter().any(|kind| {
        let needle = format!("{kind} {item}");
        source.match_indices(&needle).any(|(at, _)| {
            !source[..at].ends_with(ident) && !source[at + needle.len()..].starts_with(ident)
        })
    })
}

#[test]
fn architecture_links_name_items_that_exist() {
    let page = root().join("ARCHITECTURE.md");
    let links = code_links(&read(&page));
    assert!(links.len() > 100, "code links were found ({})", links.len());
    let broken: Vec<String> = links
        .iter()
        .filter(|(name, target)| {
            let path = root().join(target);
            !path.is_file() || !defines(&read(&path), name)
        })
        .map(|(name, target)| format!("[`{name}`]({target})"))
        .collect();
    assert!(
        broken.is_empty(),
        "ARCHITECTURE.md links to items their files do not define:\n{}",
        broken.join("\n")
    );
}

/// The field names of `struct NAME { … }` in `source`.
fn fields(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("struct {name}"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("the struct ends")];
    body.lines()
        .skip(1)
        .filter_map(|line| {
            let line = line.trim();
            let (field, _) = line.split_once(':')?;
            let field = field
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .trim();
            (!field.starts_with("//") && !field.starts_with('#') && !field.is_empty())
                .then(|| field.to_owned())
        })
        .collect()
}

#[test]
fn the_configuration_page_names_every_key() {
    // The top level's keys are in one struct, a `[[databases]]` entry's in another.
    let settings = read(&root().join("crates/config/src/raw.rs"));
    let database = read(&root().join("crates/config/src/database.rs"));
    let page = read(&root().join("docs/configuration.md"));
    let mut missing = Vec::new();
    let mut keys = fields(&settings, "RawSettings");
    keys.extend(fields(&database, "RawDatabase"));
    assert!(keys.len() > 20, "{keys:?}");
    for key in keys {
        if !page.contains(&format!("`{key}`")) && !page.contains(&format!("`[[{key}]]`")) {
            missing.push(key);
        }
    }
    assert!(missing.is_empty(), "undocumented keys: {missing:?}");
}

#[test]
fn the_observability_page_names_every_metric() {
    // One file per subsystem; split each on its own so a quote cannot pair across files.
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("crates/metrics/src"))
        .expect("crates/metrics/src")
        .map(|entry| entry.expect("crates/metrics/src entry").path())
        .collect();
    files.sort();
    let sources: Vec<String> = files.iter().map(|file| read(file)).collect();
    let page = read(&root().join("docs/observability.md"));
    let names: HashSet<&str> = sources
        .iter()
        .flat_map(|source| source.split('"'))
        .filter(|s| {
            s.starts_with("segmint_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .collect();
    assert!(names.len() > 15, "{names:?}");
    let missing: Vec<_> = names
        .iter()
        .filter(|name| !page.contains(&format!("`{name}")))
        .collect();
    assert!(missing.is_empty(), "undocumented metrics: {missing:?}");
}

#[test]
fn the_http_page_names_every_route() {
    let spec: serde_json::Value =
        serde_json::from_str(&read(&root().join("src/server/openapi.json"))).unwrap();
    let page = read(&root().join("docs/http-api.md"));
    let paths = spec["paths"].as_object().expect("paths");
    assert!(paths.len() > 8, "{paths:?}");
    let missing: Vec<_> = paths
        .keys()
        .filter(|p| !page.contains(p.as_str()))
        .collect();
    assert!(missing.is_empty(), "undocumented routes: {missing:?}");
}

#[test]
fn the_admin_page_names_every_refusal_reason() {
    let page = read(&root().join("docs/admin-cli.md"));
    let codes: Vec<&str> = segmint::store::Reason::ALL
        .iter()
        .map(|r| r.code())
        .collect();
    assert!(codes.len() > 15, "{codes:?}");
    let missing: Vec<_> = codes
        .iter()
        .filter(|code| !page.contains(&format!("| `{code}` |")))
        .collect();
    assert!(missing.is_empty(), "undocumented reasons: {missing:?}");
    // The table's rows are the reasons there are, no more.
    let table = page
        .lines()
        .skip_while(|l| !l.starts_with("| `reason` |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    let unknown: Vec<&str> = table
        .filter_map(|l| l.strip_prefix("| `")?.split_once("` |").map(|(c, _)| c))
        .filter(|c| !codes.contains(c))
        .collect();
    assert!(unknown.is_empty(), "reasons that do not exist: {unknown:?}");
}
