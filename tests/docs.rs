//! Keeps the documentation honest: every relative link in the hand-written pages reaches
//! a file and a heading that exist; every code item ARCHITECTURE.md names with its file
//! (`` `Store::reserve` (crates/store/src/cluster/reserve.rs) ``) and every code link
//! names an item that file defines; the pages hold no count of the code's own size
//! (methods, lines, tests …) but those checked here against the code; ARCHITECTURE.md
//! stays short enough to read; CONTRIBUTING.md states the commit rule; and the
//! reference pages name every configuration key, every metric, every route and every
//! refusal reason segmint has.

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
        "CONTRIBUTING.md",
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

/// Whether `name` is an item's name: `Type::method`, `module::function` or a bare name.
fn is_item(name: &str) -> bool {
    name.split("::")
        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// The code links of a page, outside code blocks: `[`name`](path.rs)`, whose text is an
/// item name in backticks (`Type::method` or a bare name) and whose target is a
/// relative path to a Rust file. Returns `(name, target)`.
fn code_links(text: &str) -> Vec<(String, String)> {
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
fn code_links_name_items_that_exist() {
    let mut broken = Vec::new();
    for page in pages() {
        for (name, target) in code_links(&read(&page)) {
            let path = page.parent().unwrap().join(&target);
            if !path.is_file() || !defines(&read(&path), &name) {
                broken.push(format!("{}: [`{name}`]({target})", page.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "code links to items their files do not define:\n{}",
        broken.join("\n")
    );
}

/// Whether `path` is a path hint: a Rust file of the repository, from its root.
fn is_source_path(path: &str) -> bool {
    ["crates/", "src/", "tests/"]
        .iter()
        .any(|p| path.starts_with(p))
        && path.ends_with(".rs")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
}

/// The items a page names with their file, outside code blocks: one or more item names
/// in backticks followed by a path in parentheses, `` `Store::attempt` ``,
/// `` `CAS_ATTEMPTS` (crates/store/src/cluster/reserve.rs) ``; the names before one path
/// are separated by `, `, ` and ` or ` or `. Lines are joined first, so that a name and
/// its path may be on two lines. Returns `(name, path)`.
fn named_items(text: &str) -> Vec<(String, String)> {
    let joined = prose(text).collect::<Vec<_>>().join(" ");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = joined[from..].find(" (") {
        let open = from + at;
        from = open + 2;
        let Some(close) = joined[from..].find(')') else {
            break;
        };
        let path = &joined[from..from + close];
        if !is_source_path(path) {
            continue;
        }
        let mut before = &joined[..open];
        while let Some(rest) = before.strip_suffix('`') {
            let Some(start) = rest.rfind('`') else { break };
            let name = &rest[start + 1..];
            if !is_item(name) {
                break;
            }
            found.push((name.to_owned(), path.to_owned()));
            before = &rest[..start];
            match [", ", " and ", " or "]
                .iter()
                .find_map(|sep| before.strip_suffix(sep))
            {
                Some(rest) => before = rest,
                None => break,
            }
        }
    }
    found
}

#[test]
fn architecture_names_items_that_exist() {
    let named = named_items(&read(&root().join("ARCHITECTURE.md")));
    assert!(
        named.len() > 40,
        "items named with their file ({})",
        named.len()
    );
    let broken: Vec<String> = named
        .iter()
        .filter(|(name, path)| {
            let file = root().join(path);
            !file.is_file() || !defines(&read(&file), name)
        })
        .map(|(name, path)| format!("`{name}` ({path})"))
        .collect();
    assert!(
        broken.is_empty(),
        "ARCHITECTURE.md names items their files do not define:\n{}",
        broken.join("\n")
    );
}

#[test]
fn architecture_is_short_enough_to_read() {
    let text = read(&root().join("ARCHITECTURE.md"));
    assert!(
        text.len() <= 25_000,
        "ARCHITECTURE.md is {} bytes; it is the design, read in one sitting: at most 25 KB \
         (move reference tables into the rustdoc beside the code)",
        text.len()
    );
    // Prose is wrapped; a table row or a diagram may be longer, not much.
    let long: Vec<&str> = text
        .lines()
        .filter(|line| line.chars().count() > 100 && !line.starts_with('|'))
        .collect();
    assert!(
        long.is_empty(),
        "lines over 100 characters:\n{}",
        long.join("\n")
    );
}

#[test]
fn contributing_states_how_to_test_and_the_commit_rule() {
    let path = root().join("CONTRIBUTING.md");
    assert!(path.is_file(), "CONTRIBUTING.md exists");
    let text = read(&path);
    for needle in [
        "72 characters",
        "scripts/test",
        "scripts/test --deep",
        "cargo fmt",
        "cargo clippy --all-targets -- -D warnings",
        "cargo nextest run -E",
        "No silent skips",
    ] {
        assert!(text.contains(needle), "CONTRIBUTING.md names `{needle}`");
    }
}

/// What a page may not count without a check: the code's own size.
const SIZE_NOUNS: [&str; 10] = [
    "methods",
    "lines",
    "checks",
    "primitives",
    "tests",
    "scenarios",
    "modules",
    "functions",
    "variants",
    "assertions",
];

/// Numbers written as words, as far as a page would count code in them.
const NUMBER_WORDS: [&str; 20] = [
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
    "thirty",
];

/// A count a page may state because this test computes it from the code: `count`
/// `noun` in a paragraph that names `near`.
struct Verified {
    count: usize,
    noun: &'static str,
    near: &'static str,
}

/// The counts of the code the pages may state, each computed here.
fn verified_counts() -> Vec<Verified> {
    let store = read(&root().join("crates/store/src/lib.rs"));
    let start = store
        .find("pub trait SegmentStore")
        .expect("the engine trait is in crates/store/src/lib.rs");
    let body = &store[start..];
    let body = &body[..body.find("\n}\n").expect("the trait ends")];
    let methods = body
        .lines()
        .filter(|l| l.starts_with("    async fn ") || l.starts_with("    fn "))
        .count();
    assert!(
        methods > 10,
        "the engine trait's methods were counted ({methods})"
    );
    vec![Verified {
        count: methods,
        noun: "methods",
        near: "SegmentStore",
    }]
}

/// The hand-written pages whose counts are checked. BENCHMARKS.md and SCALE.md are
/// reports their scripts write, with the date and command of their run.
fn hand_written_pages() -> Vec<PathBuf> {
    pages()
        .into_iter()
        .filter(|p| !p.ends_with("grafana/README.md"))
        .collect()
}

/// Whether `text` holds a date, `2026-11-24`: a sentence of a dated report.
fn has_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.windows(10).any(|w| {
        let digits = |r: std::ops::Range<usize>| w[r].iter().all(u8::is_ascii_digit);
        digits(0..4) && w[4] == b'-' && digits(5..7) && w[7] == b'-' && digits(8..10)
    })
}

/// The counts of the code's size in one paragraph: a number (digits or a word) followed
/// by one of [`SIZE_NOUNS`], at most one word between (`90 SQL lines`). A table cell
/// and a code span (`tests/x.rs`) are read on their own, so no count pairs across them.
/// Returns the number (`None` when written as a word), the noun and the phrase.
fn size_counts(paragraph: &str) -> Vec<(Option<usize>, String, String)> {
    let mut found = Vec::new();
    let pieces = paragraph
        .split('|')
        .flat_map(|cell| cell.split('`').step_by(2));
    for piece in pieces {
        let words: Vec<String> = piece
            .split(|c: char| c.is_whitespace() || c == '(' || c == '–' || c == '/')
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .filter(|w| !w.is_empty())
            .collect();
        for (i, word) in words.iter().enumerate() {
            let number = if word.starts_with(|c: char| c.is_ascii_digit())
                && word.chars().all(|c| c.is_ascii_digit() || c == ',')
            {
                word.replace(',', "").parse::<usize>().ok()
            } else if NUMBER_WORDS.contains(&word.as_str()) {
                None
            } else {
                continue;
            };
            let noun = words
                .iter()
                .skip(i + 1)
                .take(2)
                .find(|w| SIZE_NOUNS.contains(&w.as_str()));
            if let Some(noun) = noun {
                found.push((number, noun.clone(), format!("{word} … {noun}")));
            }
        }
    }
    found
}

#[test]
fn pages_count_the_code_only_where_checked() {
    let verified = verified_counts();
    let mut unchecked = Vec::new();
    let mut allowed = 0;
    for page in hand_written_pages() {
        let text = read(&page);
        let mut paragraph = String::new();
        let mut paragraphs = Vec::new();
        for line in prose(&text) {
            if line.trim().is_empty() || line.starts_with('#') {
                paragraphs.push(std::mem::take(&mut paragraph));
            } else {
                paragraph.push_str(line);
                paragraph.push(' ');
            }
        }
        paragraphs.push(paragraph);
        // A sentence that carries a date reports a measurement of that day; every other
        // sentence is held to the rule.
        let sentences = paragraphs.iter().flat_map(|p| {
            p.split_inclusive(". ")
                .map(move |sentence| (p, sentence))
                .filter(|(_, sentence)| !has_date(sentence))
        });
        for (paragraph, sentence) in sentences {
            for (number, noun, phrase) in size_counts(sentence) {
                let ok = verified.iter().any(|v| {
                    number == Some(v.count) && noun == v.noun && paragraph.contains(v.near)
                });
                if ok {
                    allowed += 1;
                } else {
                    let shown: String = sentence.trim().chars().take(100).collect();
                    unchecked.push(format!("{}: \"{phrase}\" in: {shown}", page.display()));
                }
            }
        }
    }
    assert!(
        unchecked.is_empty(),
        "counts of the code that no test checks (remove them, or compute and check them \
         in verified_counts):\n{}",
        unchecked.join("\n")
    );
    assert!(
        allowed > 0,
        "the verified counts are stated somewhere (else drop them)"
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
