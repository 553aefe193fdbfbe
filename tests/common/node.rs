//! Node.js packages for the tests that drive segmint with a Node client (ioredis,
//! node-redis): `target/node-clients`, filled by `npm ci` from the pinned
//! `scripts/node-clients/package.json` and its `package-lock.json` unless it already
//! holds exactly those. A test that needs them fails, never skips, when they cannot be
//! installed.

use std::path::PathBuf;
use std::process::Command;

use super::python::{InstallLock, root, run};

/// The `node_modules` of `target/node-clients`, holding exactly the packages of
/// `scripts/node-clients/package-lock.json`.
pub async fn node_clients() -> PathBuf {
    let source = root().join("scripts/node-clients");
    let read = |name: &str| {
        let path = source.join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    };
    let (manifest, lock) = (read("package.json"), read("package-lock.json"));
    let wanted = format!("{manifest}{lock}");
    let target = root().join("target");
    std::fs::create_dir_all(&target).unwrap();
    let dir = target.join("node-clients");
    // What the directory was last filled from.
    let stamp = dir.join("segmint-packages.txt");
    let _lock = InstallLock::acquire(target.join("node-clients.lock")).await;
    if !std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        eprintln!(
            "node clients: installing {} into {}",
            source.display(),
            dir.display()
        );
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("package.json"), &manifest).unwrap();
        std::fs::write(dir.join("package-lock.json"), &lock).unwrap();
        run(
            "npm ci (needs Node.js 18 or newer with npm, and the npm registry)",
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir),
        );
        std::fs::write(&stamp, &wanted).unwrap();
    }
    dir.join("node_modules")
}
