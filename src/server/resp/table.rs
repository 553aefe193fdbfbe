//! `COMMAND`: the commands segmint answers, described as Redis describes its own
//! (`COMMAND INFO`'s arity, flags and key positions; `COMMAND DOCS`' summary), so that
//! a client that asks what the server supports gets what it does support.

use super::codec::Reply;

/// One command's description.
struct Spec {
    name: &'static str,
    /// Redis's arity: the arguments with the name, negative for "at least".
    arity: i64,
    flags: &'static [&'static str],
    /// Whether its first argument is a key (then it has one key, at position 1).
    key: bool,
    categories: &'static [&'static str],
    group: &'static str,
    since: &'static str,
    summary: &'static str,
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    key: bool,
    categories: &'static [&'static str],
    (group, since, summary): (&'static str, &'static str, &'static str),
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        key,
        categories,
        group,
        since,
        summary,
    }
}

/// Flags of the commands a client sends at connect, in any state.
const CONNECT: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
const CONNECTION: &[&str] = &["@fast", "@connection"];

/// Every command segmint answers, by name.
const SPECS: [Spec; 16] = [
    spec(
        "auth",
        -2,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy",
        ],
        false,
        CONNECTION,
        (
            "connection",
            "1.0.0",
            "Authenticates the connection with a segmint token.",
        ),
    ),
    spec(
        "client",
        -2,
        &[],
        false,
        &["@slow", "@connection"],
        (
            "connection",
            "2.4.0",
            "The connections of this token: ID, INFO, LIST, KILL, SETNAME, GETNAME, SETINFO.",
        ),
    ),
    spec(
        "command",
        -1,
        &["loading", "stale"],
        false,
        &["@slow", "@connection"],
        (
            "server",
            "2.8.13",
            "Describes the commands segmint answers.",
        ),
    ),
    spec(
        "config",
        -2,
        &[],
        false,
        &["@slow"],
        (
            "server",
            "2.0.0",
            "CONFIG GET: the settings of Redis's that are true of segmint.",
        ),
    ),
    spec(
        "discard",
        1,
        CONNECT,
        false,
        &["@fast", "@transaction"],
        (
            "transactions",
            "2.0.0",
            "Discards the commands queued since MULTI.",
        ),
    ),
    spec(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        false,
        &["@slow", "@transaction"],
        (
            "transactions",
            "1.2.0",
            "Runs the commands queued since MULTI, in order.",
        ),
    ),
    spec(
        "get",
        2,
        &["readonly", "fast"],
        true,
        &["@read", "@string", "@fast"],
        ("string", "1.0.0", "A sequence key's current number."),
    ),
    spec(
        "hello",
        -1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy",
        ],
        false,
        CONNECTION,
        (
            "connection",
            "6.0.0",
            "Chooses RESP2 or RESP3, and authenticates.",
        ),
    ),
    spec(
        "ids",
        3,
        &["write", "fast"],
        true,
        &["@write", "@fast"],
        ("string", "segmint", "N IDs of an ID biz."),
    ),
    spec(
        "incr",
        2,
        &["write", "denyoom", "fast"],
        true,
        &["@write", "@string", "@fast"],
        (
            "string",
            "1.0.0",
            "The next ID of an ID biz, or the next number of a sequence key.",
        ),
    ),
    spec(
        "incrby",
        3,
        &["write", "denyoom", "fast"],
        true,
        &["@write", "@string", "@fast"],
        (
            "string",
            "1.0.0",
            "N consecutive numbers of a sequence key, answering the last.",
        ),
    ),
    spec(
        "info",
        -1,
        &["loading", "stale"],
        false,
        &["@slow", "@dangerous"],
        (
            "server",
            "1.0.0",
            "The server, its clients and its counts, in Redis's format.",
        ),
    ),
    spec(
        "multi",
        1,
        CONNECT,
        false,
        &["@fast", "@transaction"],
        (
            "transactions",
            "1.2.0",
            "Queues the commands that follow until EXEC.",
        ),
    ),
    spec(
        "ping",
        -1,
        &["fast"],
        false,
        CONNECTION,
        ("connection", "1.0.0", "PONG, or the message given."),
    ),
    spec(
        "quit",
        -1,
        &[
            "allow_busy",
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
        ],
        false,
        CONNECTION,
        ("connection", "1.0.0", "Closes the connection."),
    ),
    spec(
        "select",
        2,
        &["loading", "stale", "fast"],
        false,
        CONNECTION,
        ("connection", "2.0.0", "Database 0, the only one."),
    ),
];

fn specs() -> &'static [Spec] {
    &SPECS
}

fn find(name: &str) -> Option<&'static Spec> {
    specs().iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// Whether `name` is a command segmint answers.
pub(super) fn known(name: &str) -> bool {
    find(name).is_some()
}

/// Whether the command `name`'s first argument is a key.
pub(super) fn takes_key(name: &str) -> bool {
    find(name).is_some_and(|s| s.key)
}

/// `COMMAND [COUNT | LIST | INFO [name …] | DOCS [name …]]`; `None` for another
/// subcommand.
pub(super) fn command(sub: Option<&str>, names: &[String]) -> Option<Reply> {
    let chosen = || -> Vec<Option<&'static Spec>> {
        match names.is_empty() {
            true => specs().iter().map(Some).collect(),
            false => names.iter().map(|n| find(n)).collect(),
        }
    };
    let reply = match sub.map(str::to_ascii_lowercase).as_deref() {
        None => Reply::Array(specs().iter().map(info).collect()),
        Some("count") => Reply::Integer(specs().len() as i64),
        Some("list") => Reply::Array(specs().iter().map(|s| Reply::bulk(s.name)).collect()),
        Some("info") => Reply::Array(
            chosen()
                .into_iter()
                .map(|s| s.map_or(Reply::Null, info))
                .collect(),
        ),
        Some("docs") => Reply::Map(chosen().into_iter().flatten().map(docs).collect()),
        Some(_) => return None,
    };
    Some(reply)
}

/// A command's `COMMAND INFO` entry, in Redis 7's shape: name, arity, flags, first key,
/// last key, step, ACL categories, tips, key specifications, subcommands.
fn info(spec: &Spec) -> Reply {
    let statuses =
        |words: &[&'static str]| Reply::Set(words.iter().map(|w| Reply::Simple(w)).collect());
    let position = Reply::Integer(i64::from(spec.key));
    let key_specs = match spec.key {
        true => vec![key_spec(spec)],
        false => Vec::new(),
    };
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Integer(spec.arity),
        statuses(spec.flags),
        position.clone(),
        position.clone(),
        position,
        statuses(spec.categories),
        Reply::Set(Vec::new()),
        Reply::Array(key_specs),
        Reply::Array(Vec::new()),
    ])
}

/// The key specification of a command whose one key is its first argument.
fn key_spec(spec: &Spec) -> Reply {
    let flags: &[&'static str] = match spec.flags.contains(&"readonly") {
        true => &["RO", "access"],
        false => &["RW", "access", "update"],
    };
    let pair = |k: &str, v: Reply| (Reply::bulk(k), v);
    Reply::Map(vec![
        pair(
            "flags",
            Reply::Set(flags.iter().map(|f| Reply::Simple(f)).collect()),
        ),
        pair(
            "begin_search",
            Reply::Map(vec![
                pair("type", Reply::bulk("index")),
                pair("spec", Reply::Map(vec![pair("index", Reply::Integer(1))])),
            ]),
        ),
        pair(
            "find_keys",
            Reply::Map(vec![
                pair("type", Reply::bulk("range")),
                pair(
                    "spec",
                    Reply::Map(vec![
                        pair("lastkey", Reply::Integer(0)),
                        pair("keystep", Reply::Integer(1)),
                        pair("limit", Reply::Integer(0)),
                    ]),
                ),
            ]),
        ),
    ])
}

/// A command's `COMMAND DOCS` entry: its name, and its summary, version and group.
fn docs(spec: &Spec) -> (Reply, Reply) {
    let pair = |k: &str, v: &str| (Reply::bulk(k), Reply::bulk(v));
    (
        Reply::bulk(spec.name),
        Reply::Map(vec![
            pair("summary", spec.summary),
            pair("since", spec.since),
            pair("group", spec.group),
        ]),
    )
}

/// The names of the commands described, for the metric's labels to be checked against.
#[cfg(test)]
pub(super) fn names() -> Vec<&'static str> {
    specs().iter().map(|s| s.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_counted_is_described() {
        let mut counted: Vec<&str> = crate::metrics::RESP_COMMANDS.to_vec();
        counted.retain(|c| *c != "other");
        assert_eq!(names(), counted);
        assert_eq!(
            command(Some("COUNT"), &[]),
            Some(Reply::Integer(counted.len() as i64))
        );
        let Some(Reply::Array(infos)) = command(Some("info"), &["INCR".into(), "set".into()])
        else {
            panic!("an array");
        };
        assert!(
            matches!(&infos[..], [Reply::Array(incr), Reply::Null] if incr[1] == Reply::Integer(2))
        );
        assert_eq!(command(Some("getkeys"), &[]), None);
    }
}
