//! `INFO` and `CONFIG GET`: what Redis clients read of a server at connect (ioredis's
//! ready check reads `loading`; redis-benchmark reads `save` and `appendonly`), in
//! Redis's format, every figure true of this process.

use std::fmt::Write;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::Shared;
use super::codec::Reply;

/// The Redis version segmint answers as: clients choose what to send by it, and
/// segmint answers what they send to a Redis 7.2 at connect.
pub const REDIS_VERSION: &str = "7.2.0";

/// What `INFO` says of the host and process, read once at start.
pub(super) struct Host {
    /// `os`: the kernel's name, release and machine, as `uname -srm` prints them.
    os: String,
    /// `run_id`: 40 random hex digits, new each start, as Redis's.
    run_id: String,
    /// The listener's port.
    port: u16,
    /// `maxclients`: `resp.max_clients`, or the process's limit of open files when
    /// that is lower.
    pub max_clients: usize,
}

impl Host {
    pub fn new(port: u16, max_clients: usize) -> Host {
        let proc = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .map(|s| s.trim().to_owned())
                .ok()
        };
        let os = match (proc("ostype"), proc("osrelease")) {
            (Some(kind), Some(release)) => format!("{kind} {release} {}", std::env::consts::ARCH),
            _ => format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        };
        Host {
            os,
            run_id: hex::encode(rand::random::<[u8; 20]>()),
            port,
            max_clients: open_files_limit()
                .and_then(|fds| usize::try_from(fds).ok())
                .map_or(max_clients, |fds| fds.min(max_clients)),
        }
    }
}

/// The soft limit of open files, from `/proc/self/limits`.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The sections, in the order Redis writes them; `INFO`, `INFO default`, `INFO all`
/// and `INFO everything` write all of them.
const SECTIONS: [&str; 7] = [
    "server",
    "clients",
    "persistence",
    "stats",
    "replication",
    "cluster",
    "keyspace",
];

/// `INFO [section …]`: the sections asked (names of no section are ignored, as by
/// Redis), as text of `# Section` headers and `field:value` lines.
pub(super) fn info(shared: &Shared, asked: &[String], now: Instant) -> Reply {
    let all = asked.is_empty()
        || asked.iter().any(|a| {
            ["all", "default", "everything"]
                .iter()
                .any(|s| a.eq_ignore_ascii_case(s))
        });
    let mut text = String::new();
    for section in SECTIONS {
        if !(all || asked.iter().any(|a| a.eq_ignore_ascii_case(section))) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let mut title = section.to_owned();
        title[..1].make_ascii_uppercase();
        let _ = write!(text, "# {title}\r\n");
        for (field, value) in fields(shared, section, now) {
            let _ = write!(text, "{field}:{value}\r\n");
        }
    }
    Reply::Text(text)
}

/// The fields of one section.
fn fields(shared: &Shared, section: &str, now: Instant) -> Vec<(&'static str, String)> {
    let clients = &shared.clients;
    let (connected, received, commands) = clients.counts();
    match section {
        "server" => {
            let uptime = now.saturating_duration_since(clients.started).as_secs();
            let since_epoch = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let host = &shared.host;
            vec![
                ("redis_version", REDIS_VERSION.to_owned()),
                ("segmint_version", env!("CARGO_PKG_VERSION").to_owned()),
                ("redis_mode", "standalone".to_owned()),
                ("os", host.os.clone()),
                ("arch_bits", (usize::BITS).to_string()),
                ("multiplexing_api", multiplexing().to_owned()),
                ("process_id", std::process::id().to_string()),
                ("run_id", host.run_id.clone()),
                ("tcp_port", host.port.to_string()),
                ("server_time_usec", since_epoch.as_micros().to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86_400).to_string()),
            ]
        }
        "clients" => {
            let mut fields = vec![
                ("connected_clients", connected.to_string()),
                ("maxclients", shared.host.max_clients.to_string()),
            ];
            fields.push(("blocked_clients", "0".to_owned()));
            fields
        }
        // segmint loads nothing at start: its numbers are in its databases.
        "persistence" => vec![("loading", "0".into()), ("async_loading", "0".into())],
        "stats" => vec![
            ("total_connections_received", received.to_string()),
            ("total_commands_processed", commands.to_string()),
            (
                "instantaneous_ops_per_sec",
                clients.ops_per_sec().to_string(),
            ),
            ("rejected_connections", "0".into()),
        ],
        "replication" => vec![("role", "master".into()), ("connected_slaves", "0".into())],
        "cluster" => vec![("cluster_enabled", "0".into())],
        _ => Vec::new(),
    }
}

/// The readiness API tokio's reactor uses here.
fn multiplexing() -> &'static str {
    match std::env::consts::OS {
        "linux" | "android" => "epoll",
        "windows" => "iocp",
        _ => "kqueue",
    }
}

/// `CONFIG GET pattern …`: the settings of Redis's that are true of segmint, as a map
/// of those matching any pattern (Redis's glob, case-insensitive).
pub(super) fn config_get(shared: &Shared, patterns: &[String]) -> Reply {
    let max = Some(shared.host.max_clients.to_string());
    let settings = [
        // Only database 0 exists.
        ("databases", Some("1".to_owned())),
        // An idle connection is never closed.
        ("timeout", Some("0".to_owned())),
        // Nothing is snapshotted or appended: the numbers are in the databases.
        ("save", Some(String::new())),
        ("appendonly", Some("no".to_owned())),
        ("maxclients", max),
    ];
    let pairs = settings
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .filter(|(name, _)| patterns.iter().any(|p| glob(p.as_bytes(), name.as_bytes())))
        .map(|(name, value)| (Reply::bulk(name), Reply::bulk(value)))
        .collect();
    Reply::Map(pairs)
}

/// Whether `name` matches `pattern`: `*` any run, `?` one character, else the same
/// character whatever its case. Greedy, going back to the last `*` on a mismatch: time
/// in proportion to the product of the lengths, whatever the pattern.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // The last `*` seen, and where in `name` its run ends for now.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((at, end)) => {
                    star = Some((at, end + 1));
                    (p, n) = (at + 1, end + 1);
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_as_redis_matches_config_names() {
        for (pattern, name, matches) in [
            ("*", "save", true),
            ("max*", "maxclients", true),
            ("MAXCLIENTS", "maxclients", true),
            ("?ave", "save", true),
            ("sav", "save", false),
            ("*only", "appendonly", true),
            ("a*x", "appendonly", false),
            ("**a*?*", "save", true),
            ("", "save", false),
        ] {
            assert_eq!(
                glob(pattern.as_bytes(), name.as_bytes()),
                matches,
                "{pattern}"
            );
        }
        let stars = "*".repeat(4_000) + "x";
        assert!(!glob(stars.as_bytes(), b"maxclients"), "no blow-up");
    }
}
