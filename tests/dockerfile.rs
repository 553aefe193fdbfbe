//! The Dockerfile's dependency layer builds against stub sources, and cargo reads every
//! target the manifests declare: a bench or test added without its stub stops the
//! image's build ("can't find `listing` bench at `benches/listing.rs`"). This runs the
//! stub step as the image does (its shell commands up to the build, in an empty
//! directory) and checks that it leaves a file at every target path of every manifest
//! of the workspace, and that every member's manifest is copied in first.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's members, as `Cargo.toml` lists them (`crates/core`, …).
fn members(manifest: &str) -> Vec<String> {
    let list = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("a workspace members list");
    list.lines()
        .map(|l| l.trim().trim_end_matches(','))
        .filter_map(|l| l.strip_prefix('"')?.strip_suffix('"'))
        .map(str::to_owned)
        .collect()
}

/// The path of each bench, test and binary target `manifest` declares, relative to its
/// directory (a bench's default is `benches/NAME.rs`, a test's `tests/NAME.rs`).
fn declared_targets(manifest: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut section = String::new();
    let (mut name, mut path) = (None::<String>, None::<String>);
    let mut flush = |section: &str, name: &mut Option<String>, path: &mut Option<String>| {
        let default = match section {
            "[[bench]]" => name.as_ref().map(|n| format!("benches/{n}.rs")),
            "[[test]]" => name.as_ref().map(|n| format!("tests/{n}.rs")),
            "[[bin]]" => name.as_ref().map(|n| format!("src/bin/{n}.rs")),
            _ => None,
        };
        if let Some(target) = path.take().or(default) {
            targets.push(target);
        }
        *name = None;
    };
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(&section, &mut name, &mut path);
            section = line.to_owned();
            continue;
        }
        let value = |key: &str| {
            let rest = line.strip_prefix(key)?.trim_start().strip_prefix('=')?;
            Some(rest.trim().trim_matches('"').to_owned())
        };
        if section.starts_with("[[") {
            name = value("name").or(name);
            path = value("path").or(path);
        }
    }
    flush(&section, &mut name, &mut path);
    targets
}

/// The shell commands of the stub step: the `RUN` that makes `src` and `benches`, up
/// to its `cargo build`.
fn stub_step(dockerfile: &str) -> String {
    let start = dockerfile
        .find("RUN mkdir -p src benches")
        .expect("the stub step (RUN mkdir -p src benches …)");
    let run = &dockerfile[start + "RUN ".len()..];
    let until = run.find("&& cargo build").expect("the stub step's build");
    run[..until]
        .lines()
        .map(|l| l.trim_end().trim_end_matches('\\'))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_dockerfile_stubs_every_target_the_manifests_declare() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = members(&manifest);
    assert!(members.len() >= 5, "members read: {members:?}");
    // Every path a stub must fill: the package's own, then each member's.
    let mut needed: Vec<String> = declared_targets(&manifest);
    needed.push("src/lib.rs".into());
    for member in &members {
        let copy = format!("COPY {member}/Cargo.toml {member}/");
        assert!(dockerfile.contains(&copy), "the Dockerfile lacks `{copy}`");
        let text = std::fs::read_to_string(root().join(member).join("Cargo.toml")).unwrap();
        for target in declared_targets(&text) {
            needed.push(format!("{member}/{target}"));
        }
        for source in ["src/lib.rs", "src/main.rs"] {
            if root().join(member).join(source).is_file() {
                needed.push(format!("{member}/{source}"));
            }
        }
    }
    for target in ["benches/listing.rs", "tests/main.rs"] {
        assert!(
            needed.iter().any(|n| n == target),
            "{target} was not read from the manifests: {needed:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg("-ec")
        .arg(stub_step(&dockerfile))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the stub step failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let missing: Vec<&String> = needed
        .iter()
        .filter(|n| !Path::new(dir.path()).join(n).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "the Dockerfile's stub step leaves no file at {missing:?}"
    );
}
