//! The code's shape, read from its text as TigerBeetle's tidy check reads its own: the
//! layering of the server (no route file imports another route file; the Redis door
//! imports no route file and no HTTP type; the service knows no transport) and the
//! length of functions.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How long a production function may be, from its `fn` line to its closing brace.
const LONG: usize = 100;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `use` statements of `text`, whitespace removed (`usesuper::{a,b::c};`), up to
/// its test module.
fn uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in production(text) {
        let trimmed = line.trim();
        if current.is_none() && (trimmed.starts_with("use ") || trimmed.starts_with("pub use ")) {
            current = Some(String::new());
        }
        if let Some(statement) = &mut current {
            statement.extend(trimmed.chars().filter(|c| !c.is_whitespace()));
            if trimmed.ends_with(';') {
                out.push(current.take().expect("a statement"));
            }
        }
    }
    out
}

/// The lines of `text` before its test module (`#[cfg(test)]` at the left margin).
fn production(text: &str) -> impl Iterator<Item = &str> {
    text.lines().take_while(|l| !l.starts_with("#[cfg(test)]"))
}

/// The modules a `use` statement names right after `prefix` (`super::`): the first
/// segment of each path it imports.
fn named_after(statement: &str, prefix: &str) -> BTreeSet<String> {
    let statement = statement
        .trim_start_matches("pub")
        .trim_start_matches("use");
    let Some(rest) = statement.strip_prefix(prefix) else {
        return BTreeSet::new();
    };
    let rest = rest.trim_end_matches(';');
    let items: Vec<&str> = match rest.strip_prefix('{') {
        Some(inner) => {
            // Top-level items of the braces.
            let inner = inner.strip_suffix('}').unwrap_or(inner);
            let mut items = Vec::new();
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&inner[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(&inner[start..]);
            items
        }
        None => vec![rest],
    };
    items
        .into_iter()
        .map(|item| item.split("::").next().unwrap_or_default().to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The server's route files: those that give handlers to routes (`.to(`), but the
/// application's assembly.
fn route_modules(server: &Path) -> BTreeSet<String> {
    std::fs::read_dir(server)
        .expect("src/server")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_stem()?.to_str()?.to_owned();
            let is_route = path.extension().is_some_and(|x| x == "rs")
                && name != "app"
                && production(&read(&path)).any(|l| l.contains(".to("));
            is_route.then_some(name)
        })
        .collect()
}

#[test]
fn routes_import_no_route_and_the_redis_door_no_http() {
    let server = root().join("src/server");
    let routes = route_modules(&server);
    for expected in ["v1", "compat", "sequences", "snowflake", "leaf", "status"] {
        assert!(routes.contains(expected), "route files found: {routes:?}");
    }
    let mut broken = Vec::new();
    for name in &routes {
        let path = server.join(format!("{name}.rs"));
        for statement in uses(&read(&path)) {
            let named = named_after(&statement, "super::");
            for other in named.intersection(&routes) {
                if other != name {
                    broken.push(format!(
                        "route file {name}.rs imports route file {other}: {statement}"
                    ));
                }
            }
            if statement.contains("crate::server::") {
                broken.push(format!(
                    "route file {name}.rs imports through crate::server: {statement}"
                ));
            }
        }
    }
    for path in rust_files(&server.join("resp")) {
        let file = path.display().to_string();
        for statement in uses(&read(&path)) {
            let named: BTreeSet<String> = named_after(&statement, "super::super::")
                .into_iter()
                .chain(named_after(&statement, "crate::server::"))
                .collect();
            if !named.is_empty() {
                broken.push(format!("{file} imports from the HTTP server: {statement}"));
            }
            if statement.contains("actix_web") || statement.contains("reqwest") {
                broken.push(format!("{file} imports an HTTP type: {statement}"));
            }
        }
    }
    for path in rust_files(&root().join("src/service")) {
        let file = path.display().to_string();
        for statement in uses(&read(&path)) {
            for transport in ["actix_web", "reqwest", "crate::server", "http::"] {
                if statement.contains(transport) {
                    broken.push(format!(
                        "the service's {file} imports {transport}: {statement}"
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the layering is broken:\n{}",
        broken.join("\n")
    );
}

/// A function of the production code and its length in lines.
#[derive(Debug)]
struct Function {
    file: String,
    name: String,
    lines: usize,
}

/// The functions of `text` with a body, and their lengths: a function begins at a line
/// `fn name(` (after its qualifiers) and ends at the first `}` at its indentation;
/// rustfmt's layout makes that exact.
fn functions(file: &str, text: &str) -> Vec<Function> {
    let lines: Vec<&str> = production(text).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let mut words = trimmed;
        for qualifier in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            words = words.strip_prefix(qualifier).unwrap_or(words);
        }
        let Some(rest) = words.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{}}}", " ".repeat(indent));
        // The signature ends at the first line ending in `;` (a declaration, no body),
        // `{}` (an empty body) or `{` (the body opens).
        let mut end = None;
        for (j, later) in lines.iter().enumerate().skip(i) {
            let later = later.trim_end();
            if later.ends_with(';') {
                break;
            }
            if later.ends_with('}') {
                end = Some(j);
                break;
            }
            if later.ends_with('{') {
                end = lines
                    .iter()
                    .enumerate()
                    .skip(j + 1)
                    .find(|(_, l)| l.trim_end() == close)
                    .map(|(k, _)| k);
                break;
            }
        }
        if let Some(end) = end {
            out.push(Function {
                file: file.to_owned(),
                name,
                lines: end - i + 1,
            });
        }
    }
    out
}

/// Every production function of the workspace: `src/` and each crate's `src/` (the
/// model checker's crate is a test harness, and test modules are left out).
fn production_functions() -> Vec<Function> {
    let root = root();
    let mut dirs = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let path = entry.expect("an entry").path();
        if path.file_name().is_some_and(|n| n != "model") {
            dirs.push(path.join("src"));
        }
    }
    let mut all = Vec::new();
    for dir in dirs {
        for path in rust_files(&dir) {
            let file = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .display()
                .to_string();
            all.extend(functions(&file, &read(&path)));
        }
    }
    all
}

#[test]
fn use_lines_are_read_as_written() {
    // The Redis door's imports before the service layer (087f5ed): both are refused.
    let text = "use crate::biz::BizTag;\nuse super::super::sequences::{current_of, take};\nuse super::super::{\n    AppState, authorize,\n};\n#[cfg(test)]\nuse super::super::v1;\n";
    let statements = uses(text);
    assert_eq!(statements.len(), 3, "{statements:?}");
    assert_eq!(
        named_after(&statements[1], "super::super::"),
        BTreeSet::from(["sequences".to_owned()])
    );
    assert_eq!(
        named_after(&statements[2], "super::super::"),
        BTreeSet::from(["AppState".to_owned(), "authorize".to_owned()])
    );
    assert_eq!(
        named_after(
            "usesuper::{base::{AppState,app_state},v1::bearer};",
            "super::"
        ),
        BTreeSet::from(["base".to_owned(), "v1".to_owned()])
    );
}

#[test]
fn functions_are_measured_as_written() {
    let text = "fn short() {\n    one();\n}\n\n    pub async fn longer(\n        a: u8,\n    ) -> u8 {\n        a\n    }\ntrait T {\n    fn declared(&self);\n    fn given(&self) {}\n}\n#[cfg(test)]\nmod tests {\n    fn ignored() {\n    }\n}\n";
    let found: Vec<(String, usize)> = functions("x.rs", text)
        .into_iter()
        .map(|f| (f.name, f.lines))
        .collect();
    assert_eq!(
        found,
        vec![
            ("short".to_owned(), 3),
            ("longer".to_owned(), 5),
            ("given".to_owned(), 1)
        ]
    );
}

#[test]
fn no_production_function_grows_past_a_hundred_lines() {
    let mut long: Vec<Function> = production_functions()
        .into_iter()
        .filter(|f| f.lines > LONG)
        .collect();
    long.sort_by_key(|f| std::cmp::Reverse(f.lines));
    let shown: Vec<String> = long
        .iter()
        .map(|f| format!("{} lines: {} ({})", f.lines, f.name, f.file))
        .collect();
    assert!(
        long.is_empty(),
        "{} production function(s) over {LONG} lines: split each into named steps:\n{}",
        long.len(),
        shown.join("\n")
    );
}
