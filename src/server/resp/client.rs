//! `CLIENT`: a connection's id, name and library, and the connections of its token
//! (`LIST`, `KILL`), as Redis answers them. See [`super::clients`] for who sees whom.

use std::time::Instant;

use super::Shared;
use super::clients::{Client, Filter};
use super::codec::Reply;

/// `CLIENT sub args…` from the connection `me`.
pub(super) fn client(shared: &Shared, me: &Client, sub: &str, args: &[String]) -> Reply {
    let now = Instant::now();
    // Shown as this connection's command by its own `CLIENT LIST` and `INFO`, as Redis
    // shows it.
    {
        let mut state = me.state();
        state.cmd = Some("client");
        state.active = Some(now);
    }
    match (sub, args) {
        ("id", []) => Reply::Integer(me.id as i64),
        ("info", []) => Reply::Text(me.line(now)),
        ("list", filters) => list(shared, me, filters, now),
        ("kill", filters) => kill(shared, me, filters),
        ("setname", [name]) => match valid("Client names", name) {
            Ok(()) => {
                me.state().name = Some(name.clone()).filter(|n| !n.is_empty());
                Reply::Simple("OK")
            }
            Err(reply) => reply,
        },
        ("getname", []) => match &me.state().name {
            Some(name) => Reply::bulk(name.clone()),
            None => Reply::Null,
        },
        ("setinfo", [attribute, value]) => set_info(me, attribute, value),
        // Asked by clients (redis-py 8) at connect: segmint never moves a
        // connection's endpoint, so there is nothing to notify and nothing to refuse.
        ("maint_notifications", _) => Reply::Simple("OK"),
        _ => Reply::error(
            "ERR",
            format!(
                "unknown subcommand or wrong number of arguments for '{sub}'. Try CLIENT HELP."
            ),
        ),
    }
}

/// Refuses a name or library field with a space, a line break or another character
/// `CLIENT LIST`'s lines could not show, as Redis does.
///
/// # Errors
/// The reply naming `what`.
pub(super) fn valid(what: &str, value: &str) -> Result<(), Reply> {
    match value.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        true => Ok(()),
        false => Err(Reply::error(
            "ERR",
            format!("{what} cannot contain spaces, newlines or special characters."),
        )),
    }
}

/// `CLIENT SETINFO LIB-NAME name` or `LIB-VER version`, shown by `CLIENT LIST`.
fn set_info(me: &Client, attribute: &str, value: &str) -> Reply {
    let (lib_name, what) = match attribute.to_ascii_lowercase().as_str() {
        "lib-name" => (true, "lib-name"),
        "lib-ver" => (false, "lib-ver"),
        _ => {
            return Reply::error("ERR", format!("Unrecognized option '{attribute}'"));
        }
    };
    if let Err(reply) = valid(what, value) {
        return reply;
    }
    let mut state = me.state();
    let field = match lib_name {
        true => &mut state.lib_name,
        false => &mut state.lib_ver,
    };
    *field = Some(value.to_owned()).filter(|v| !v.is_empty());
    Reply::Simple("OK")
}

/// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id …]`: the lines of the
/// connections of this connection's token.
fn list(shared: &Shared, me: &Client, filters: &[String], now: Instant) -> Reply {
    let (normal, ids) = match filters {
        [] => (true, None),
        [t, kind] if t.eq_ignore_ascii_case("type") => match kind.to_ascii_lowercase().as_str() {
            "normal" => (true, None),
            "master" | "replica" | "slave" | "pubsub" => (false, None),
            _ => return Reply::error("ERR", format!("Unknown client type '{kind}'")),
        },
        [i, ids @ ..] if i.eq_ignore_ascii_case("id") && !ids.is_empty() => {
            match ids.iter().map(|id| id.parse::<u64>()).collect() {
                Ok(ids) => (true, Some(ids)),
                Err(_) => return Reply::error("ERR", "Invalid client ID"),
            }
        }
        _ => return Reply::error("ERR", "syntax error"),
    };
    let token = me.state().token;
    let lines: String = shared
        .clients
        .visible(token.as_ref())
        .into_iter()
        .filter(|c| {
            normal
                && ids
                    .as_ref()
                    .is_none_or(|ids: &Vec<u64>| ids.contains(&c.id))
        })
        .map(|c| c.line(now))
        .collect();
    Reply::Text(lines)
}

/// `CLIENT KILL addr:port` (`+OK`, or an error when no connection of this token has
/// that address), or `CLIENT KILL [ID id] [ADDR addr:port] [LADDR addr:port] [USER
/// default] [SKIPME yes|no]` (how many were closed; the caller is spared unless
/// `SKIPME no`).
fn kill(shared: &Shared, me: &Client, args: &[String]) -> Reply {
    let token = me.state().token;
    if let [addr] = args {
        let filter = Filter {
            addr: Some(addr.clone()),
            ..Filter::default()
        };
        return match shared.clients.kill(&filter, token.as_ref(), me.id) {
            0 => Reply::error("ERR", "No such client"),
            _ => Reply::Simple("OK"),
        };
    }
    match filter(args) {
        Ok(Some(filter)) => {
            Reply::Integer(shared.clients.kill(&filter, token.as_ref(), me.id) as i64)
        }
        // A user other than `default` names no connection: there is only `default`.
        Ok(None) => Reply::Integer(0),
        Err(reply) => reply,
    }
}

/// The filters of `CLIENT KILL`'s second form; `None` when they can match nothing.
fn filter(args: &[String]) -> Result<Option<Filter>, Reply> {
    let syntax = || Reply::error("ERR", "syntax error");
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return Err(syntax());
    }
    let mut filter = Filter {
        skip_me: true,
        ..Filter::default()
    };
    let mut matches_any = true;
    for pair in args.chunks_exact(2) {
        let value = &pair[1];
        match pair[0].to_ascii_lowercase().as_str() {
            "id" => match value.parse::<u64>() {
                Ok(id) if id > 0 => filter.id = Some(id),
                _ => return Err(Reply::error("ERR", "client-id should be greater than 0")),
            },
            "addr" => filter.addr = Some(value.clone()),
            "laddr" => filter.laddr = Some(value.clone()),
            "user" => matches_any &= value == "default",
            "skipme" => match value.to_ascii_lowercase().as_str() {
                "yes" => filter.skip_me = true,
                "no" => filter.skip_me = false,
                _ => return Err(syntax()),
            },
            _ => return Err(syntax()),
        }
    }
    Ok(matches_any.then_some(filter))
}
