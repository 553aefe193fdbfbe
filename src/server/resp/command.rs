//! The commands of the Redis protocol, each parsed into a value and run against the
//! server's state. Keys name bizs by the `[resp] keys` table, else by themselves
//! ([`Session::place`]).

use std::sync::Arc;
use std::time::Instant;

use crate::biz::{BatchSize, BizTag, token_digest};
use crate::sequence::MAX_COUNT;

use super::Shared;
use super::client::{client, valid};
use super::clients::Client;
use super::codec::Reply;
use super::{info, table};
use crate::service::{Caller, Error, Service, live_token};

/// A command as the client sent it, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Ping(Option<Vec<u8>>),
    Auth(Option<String>, String),
    Hello {
        protocol: Option<String>,
        auth: Option<(String, String)>,
        name: Option<String>,
    },
    Select(String),
    Client(String, Vec<String>),
    Quit,
    /// `COMMAND [sub [name …]]`.
    Commands(Option<String>, Vec<String>),
    /// `CONFIG GET pattern …`.
    Config(Vec<String>),
    Info(Vec<String>),
    Incr(String),
    IncrBy(String, String),
    Get(String),
    Ids(String, String),
    Multi,
    Exec,
    Discard,
}

/// The commands a client may send before `AUTH`.
fn before_auth(command: &Command) -> bool {
    matches!(
        command,
        Command::Auth(..) | Command::Hello { .. } | Command::Quit
    )
}

/// The name counted in `segmint_resp_commands_total`.
fn label(command: &Command) -> &'static str {
    match command {
        Command::Ping(_) => "ping",
        Command::Auth(..) => "auth",
        Command::Hello { .. } => "hello",
        Command::Select(_) => "select",
        Command::Client(..) => "client",
        Command::Quit => "quit",
        Command::Commands(..) => "command",
        Command::Config(_) => "config",
        Command::Info(_) => "info",
        Command::Incr(_) => "incr",
        Command::IncrBy(..) => "incrby",
        Command::Get(_) => "get",
        Command::Ids(..) => "ids",
        Command::Multi => "multi",
        Command::Exec => "exec",
        Command::Discard => "discard",
    }
}

/// The arguments as text. A key is text, and is never altered: two keys that differ
/// in their bytes never share a counter, so bytes that are not UTF-8 are refused, not
/// replaced.
///
/// # Errors
/// The reply naming the argument (the key, for a command's first) and its first bad
/// byte.
fn strings(name: &str, args: Vec<Vec<u8>>) -> Result<Vec<String>, Reply> {
    let keyed = table::takes_key(name);
    args.into_iter()
        .enumerate()
        .map(|(i, arg)| {
            String::from_utf8(arg).map_err(|e| {
                let at = e.utf8_error().valid_up_to();
                let bytes = e.as_bytes();
                let what = match (keyed, i) {
                    (true, 0) => format!("key '{}'", bytes.escape_ascii()),
                    _ => format!("argument {} of '{name}'", i + 1),
                };
                Reply::error(
                    "ERR",
                    format!(
                        "{what} is not valid UTF-8 (byte 0x{:02x} at offset {at}): keys and arguments are UTF-8 text, never altered",
                        bytes[at]
                    ),
                )
            })
        })
        .collect()
}

/// The `i`th argument, moved out.
fn moved(rest: &mut [String], i: usize) -> String {
    std::mem::take(&mut rest[i])
}

/// Parses `args` (the command name first; at least one).
///
/// # Errors
/// The reply for an unknown command, a wrong number of arguments, or an argument that
/// is not UTF-8.
fn parse(args: Vec<Vec<u8>>) -> Result<Command, Reply> {
    let mut args = args.into_iter();
    let given = args.next().unwrap_or_default();
    let name = String::from_utf8_lossy(&given).to_ascii_lowercase();
    let raw: Vec<Vec<u8>> = args.collect();
    if !table::known(&name) {
        let shown: Vec<String> = raw
            .iter()
            .take(8)
            .map(|a| format!("'{}' ", a.escape_ascii()))
            .collect();
        return Err(Reply::error(
            "ERR",
            format!(
                "unknown command '{}', with args beginning with: {}",
                given.escape_ascii(),
                shown.concat()
            ),
        ));
    }
    // PING's message is answered as it came, bytes and all.
    if let ("ping", [message]) = (name.as_str(), &raw[..]) {
        return Ok(Command::Ping(Some(message.clone())));
    }
    let rest = strings(&name, raw)?;
    let wrong = || {
        Reply::error(
            "ERR",
            format!("wrong number of arguments for '{name}' command"),
        )
    };
    match name.as_str() {
        "hello" => hello(&rest),
        "config" => config(rest).ok_or_else(wrong)?,
        _ => command(&name, rest).ok_or_else(wrong),
    }
}

/// `CONFIG GET pattern …`, the only `CONFIG` answered; `None` for a wrong number of
/// arguments.
fn config(mut rest: Vec<String>) -> Option<Result<Command, Reply>> {
    let sub = rest.first()?.to_ascii_lowercase();
    match (sub.as_str(), rest.len()) {
        ("get", 1) => None,
        ("get", _) => Some(Ok(Command::Config(rest.split_off(1)))),
        _ => Some(Err(Reply::error(
            "ERR",
            format!(
                "CONFIG {} is not supported: segmint answers CONFIG GET, and is configured by its configuration file",
                sub.to_ascii_uppercase()
            ),
        ))),
    }
}

/// The command `name` (known, lower case) with its arguments `rest`; `None` for a
/// wrong number of them.
fn command(name: &str, mut rest: Vec<String>) -> Option<Command> {
    let command = match (name, rest.len()) {
        ("incr", 1) => Command::Incr(moved(&mut rest, 0)),
        ("incrby", 2) => Command::IncrBy(moved(&mut rest, 0), moved(&mut rest, 1)),
        ("get", 1) => Command::Get(moved(&mut rest, 0)),
        ("ids", 2) => Command::Ids(moved(&mut rest, 0), moved(&mut rest, 1)),
        ("ping", 0) => Command::Ping(None),
        ("auth", 1) => Command::Auth(None, moved(&mut rest, 0)),
        ("auth", 2) => Command::Auth(Some(moved(&mut rest, 0)), moved(&mut rest, 1)),
        ("select", 1) => Command::Select(moved(&mut rest, 0)),
        ("client", n) if n > 0 => {
            let sub = moved(&mut rest, 0).to_ascii_lowercase();
            Command::Client(sub, rest.split_off(1))
        }
        ("quit", _) => Command::Quit,
        ("command", 0) => Command::Commands(None, Vec::new()),
        ("command", _) => Command::Commands(Some(moved(&mut rest, 0)), rest.split_off(1)),
        ("info", _) => Command::Info(rest),
        ("multi", 0) => Command::Multi,
        ("exec", 0) => Command::Exec,
        ("discard", 0) => Command::Discard,
        _ => return None,
    };
    Some(command)
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
fn hello(rest: &[String]) -> Result<Command, Reply> {
    let mut command = Command::Hello {
        protocol: rest.first().cloned(),
        auth: None,
        name: None,
    };
    let Command::Hello { auth, name, .. } = &mut command else {
        unreachable!("just made");
    };
    let mut at = 1;
    while at < rest.len() {
        match (rest[at].to_ascii_lowercase().as_str(), &rest[at + 1..]) {
            ("auth", [user, pass, ..]) => {
                *auth = Some((user.clone(), pass.clone()));
                at += 3;
            }
            ("setname", [n, ..]) => {
                valid("Client names", n)?;
                *name = Some(n.clone());
                at += 2;
            }
            (option, _) => {
                return Err(Reply::error(
                    "ERR",
                    format!("Syntax error in HELLO option '{option}'"),
                ));
            }
        }
    }
    Ok(command)
}

/// One connection's state.
pub(super) struct Session<'a> {
    shared: &'a Shared,
    /// The token `AUTH` accepted.
    token: Option<String>,
    /// Whether replies are RESP3 (`HELLO 3`).
    resp3: bool,
    /// This connection as `CLIENT` and `INFO` show it.
    client: Arc<Client>,
    /// The last command run (its label), for `CLIENT LIST`.
    last: &'static str,
    /// The commands queued since `MULTI`, and whether one of them was refused as it
    /// was queued (then `EXEC` runs none).
    queued: Option<(Vec<Command>, bool)>,
    /// The IDs the queued commands ask for together ([`ids_asked`]).
    queued_ids: usize,
    /// `AUTH`s refused in a row: from the second on, each refusal is answered later
    /// ([`auth_delay`]).
    refused_auths: u32,
}

/// The IDs `command` asks for, as a transaction's bound counts them: `IDS key n` its
/// `n` (read as it will be run; a count it will refuse counts one), any other command
/// one.
fn ids_asked(command: &Command) -> usize {
    match command {
        Command::Ids(_, n) => BatchSize::parse("count", Some(n)).map_or(1, |n| n.get()),
        _ => 1,
    }
}

/// How long the `n`th refused `AUTH` in a row waits before it is answered: nothing for
/// the first (a typo), then 100 ms doubling to 2 s, so that one connection guesses
/// tokens at most a few times a second.
fn auth_delay(n: u32) -> std::time::Duration {
    let ms = match n {
        0 | 1 => 0,
        n => 100u64.saturating_mul(1 << (n - 2).min(5)).min(2_000),
    };
    std::time::Duration::from_millis(ms)
}

impl<'a> Session<'a> {
    pub(super) fn new(shared: &'a Shared, client: Arc<Client>) -> Session<'a> {
        Session {
            shared,
            token: None,
            resp3: false,
            client,
            last: "NULL",
            queued: None,
            queued_ids: 0,
            refused_auths: 0,
        }
    }

    pub(super) fn resp3(&self) -> bool {
        self.resp3
    }

    /// Records the last command of a batch in this connection's `CLIENT LIST` line.
    pub(super) fn touch(&self, now: Instant) {
        let multi = self.queued.as_ref().map(|(queue, _)| queue.len());
        self.client.touch(self.last, multi, now);
    }

    fn service(&self) -> &Service {
        &self.shared.service
    }

    /// The caller this connection is: its token, and never forwarded (a Redis
    /// connection reaches this server directly).
    fn caller(&self) -> Caller<'_> {
        Caller::direct(self.token.as_deref())
    }

    /// Runs one command; the reply, and whether the connection closes after it.
    ///
    /// Between `MULTI` and `EXEC` commands are queued (`+QUEUED`) and `EXEC` runs them
    /// in order, answering an array of their replies. A transaction groups commands; it
    /// isolates nothing, and need not: each number is the caller's alone either way.
    pub(super) async fn run(&mut self, args: Vec<Vec<u8>>) -> (Reply, bool) {
        let command = match parse(args) {
            Ok(command) => command,
            Err(reply) => {
                self.shared.metrics.command("other", false);
                if let Some((_, refused)) = &mut self.queued {
                    *refused = true;
                }
                return (reply, false);
            }
        };
        let name = label(&command);
        self.last = name;
        let quit = command == Command::Quit;
        let reply = match self.token.is_some() || before_auth(&command) {
            true => self.transact(command).await,
            false => {
                if let Some((_, refused)) = &mut self.queued {
                    *refused = true;
                }
                Reply::error("NOAUTH", "Authentication required.")
            }
        };
        // A queued command counts when `EXEC` runs it, as Redis counts it, and not if
        // it never runs.
        if reply != Reply::Simple("QUEUED") {
            self.shared
                .metrics
                .command(name, !matches!(reply, Reply::Error(_)));
        }
        (reply, quit)
    }

    /// `command` queued inside a transaction, or run.
    async fn transact(&mut self, command: Command) -> Reply {
        match (command, &mut self.queued) {
            (Command::Multi, Some(_)) => Reply::error("ERR", "MULTI calls can not be nested"),
            (Command::Multi, None) => {
                self.queued = Some((Vec::new(), false));
                self.queued_ids = 0;
                Reply::Simple("OK")
            }
            (Command::Exec, None) => Reply::error("ERR", "EXEC without MULTI"),
            (Command::Discard, None) => Reply::error("ERR", "DISCARD without MULTI"),
            (Command::Discard, Some(_)) => {
                self.queued = None;
                Reply::Simple("OK")
            }
            (Command::Exec, Some(_)) => {
                let Some((commands, refused)) = self.queued.take() else {
                    unreachable!("matched Some");
                };
                if refused {
                    return Reply::error(
                        "EXECABORT",
                        "Transaction discarded because of previous errors.",
                    );
                }
                let mut replies = Vec::with_capacity(commands.len());
                for command in commands {
                    let name = label(&command);
                    let reply = self.execute(command).await;
                    self.shared
                        .metrics
                        .command(name, !matches!(reply, Reply::Error(_)));
                    replies.push(reply);
                }
                Reply::Array(replies)
            }
            (Command::Quit, _) => self.execute(Command::Quit).await,
            // A transaction already refused keeps no more commands: `EXEC` runs none.
            (_, Some((_, true))) => Reply::Simple("QUEUED"),
            (_, Some((queue, refused))) if queue.len() >= self.shared.config.max_queued => {
                *queue = Vec::new();
                *refused = true;
                Reply::error(
                    "ERR",
                    format!(
                        "MULTI holds at most {} commands (resp.max_queued); the transaction is discarded",
                        self.shared.config.max_queued
                    ),
                )
            }
            (command, Some((queue, refused))) => {
                let ids = self.queued_ids.saturating_add(ids_asked(&command));
                if ids > self.shared.config.max_queued_ids {
                    *queue = Vec::new();
                    *refused = true;
                    return Reply::error(
                        "ERR",
                        format!(
                            "MULTI asks for at most {} IDs (resp.max_queued_ids); the transaction is discarded",
                            self.shared.config.max_queued_ids
                        ),
                    );
                }
                self.queued_ids = ids;
                queue.push(command);
                Reply::Simple("QUEUED")
            }
            (command, None) => self.execute(command).await,
        }
    }

    async fn execute(&mut self, command: Command) -> Reply {
        match command {
            Command::Ping(None) => Reply::Simple("PONG"),
            Command::Ping(Some(message)) => Reply::Bulk(message),
            Command::Quit => Reply::Simple("OK"),
            Command::Auth(user, token) => match self.authenticate(user.as_deref(), &token).await {
                true => Reply::Simple("OK"),
                false => wrong_pass(),
            },
            Command::Hello {
                protocol,
                auth,
                name,
            } => self.hello(protocol, auth, name).await,
            Command::Select(db) => match db.as_str() {
                "0" => Reply::Simple("OK"),
                _ => Reply::error("ERR", "DB index is out of range"),
            },
            Command::Client(sub, args) => client(self.shared, &self.client, &sub, &args),
            Command::Commands(sub, names) => {
                table::command(sub.as_deref(), &names).unwrap_or_else(|| {
                    Reply::error(
                        "ERR",
                        format!(
                            "unknown subcommand '{}'. Try COMMAND HELP.",
                            sub.unwrap_or_default()
                        ),
                    )
                })
            }
            Command::Config(patterns) => info::config_get(self.shared, &patterns),
            Command::Info(sections) => info::info(self.shared, &sections, Instant::now()),
            Command::Incr(key) => self.increment(&key, None).await,
            Command::IncrBy(key, n) => self.increment(&key, Some(&n)).await,
            Command::Get(key) => self.get(&key).await,
            Command::Ids(key, n) => self.ids(&key, &n).await,
            // Handled by `transact`.
            Command::Multi | Command::Exec | Command::Discard => {
                Reply::error("ERR", "MULTI, EXEC and DISCARD are not run inside MULTI")
            }
        }
    }

    /// Whether `token` is a live token (`user`, if given, must be `default`). A refusal
    /// after another is answered later ([`auth_delay`]).
    async fn authenticate(&mut self, user: Option<&str>, token: &str) -> bool {
        let live =
            user.is_none_or(|u| u == "default") && live_token(&self.service().store, token).await;
        if live {
            self.token = Some(token.to_owned());
            self.client.state().token = Some(token_digest(token));
            self.refused_auths = 0;
        } else {
            self.refused_auths = self.refused_auths.saturating_add(1);
            tokio::time::sleep(auth_delay(self.refused_auths)).await;
        }
        live
    }

    async fn hello(
        &mut self,
        protocol: Option<String>,
        auth: Option<(String, String)>,
        name: Option<String>,
    ) -> Reply {
        let resp3 = match protocol.as_deref() {
            None => self.resp3,
            Some("2") => false,
            Some("3") => true,
            Some(_) => return Reply::error("NOPROTO", "unsupported protocol version"),
        };
        if let Some((user, pass)) = auth {
            if !self.authenticate(Some(&user), &pass).await {
                return wrong_pass();
            }
        } else if self.token.is_none() {
            return Reply::error(
                "NOAUTH",
                "HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        self.resp3 = resp3;
        {
            let mut state = self.client.state();
            state.resp3 = resp3;
            if let Some(name) = name {
                state.name = Some(name).filter(|n| !n.is_empty());
            }
        }
        let proto = if resp3 { 3 } else { 2 };
        Reply::Map(vec![
            (Reply::bulk("server"), Reply::bulk("segmint")),
            // The version of Redis whose commands are answered: clients (Lettuce)
            // choose what to send by it. `INFO` has segmint's own.
            (Reply::bulk("version"), Reply::bulk(info::REDIS_VERSION)),
            (Reply::bulk("proto"), Reply::Integer(proto)),
            (Reply::bulk("id"), Reply::Integer(self.client.id as i64)),
            (Reply::bulk("mode"), Reply::bulk("standalone")),
            (Reply::bulk("role"), Reply::bulk("master")),
            (Reply::bulk("modules"), Reply::Array(Vec::new())),
        ])
    }

    /// The biz a key names, and the key within it for a sequence biz: an exact key of
    /// `[resp] keys`; else the longest prefix of it (those ending in `:`), the rest the
    /// key; else the key's part before its first `:` is the biz, the rest the key. A
    /// key with nothing left is its own key within the biz.
    fn place<'k>(&self, key: &'k str) -> Result<(BizTag, &'k str), Reply> {
        let table = &self.shared.config.keys;
        if let Some((_, biz)) = table.iter().find(|(k, _)| !k.ends_with(':') && k == key) {
            return Ok((biz.clone(), key));
        }
        let prefix = table
            .iter()
            .filter(|(k, _)| k.ends_with(':') && key.starts_with(k.as_str()))
            .max_by_key(|(k, _)| k.len());
        let (biz, rest) = match prefix {
            Some((k, biz)) => (biz.clone(), &key[k.len()..]),
            None => {
                let (name, rest) = key.split_once(':').unwrap_or((key, ""));
                let biz = BizTag::parse(name)
                    .map_err(|e| Reply::error("ERR", format!("key '{key}' names no biz: {e}")))?;
                (biz, rest)
            }
        };
        Ok((biz, if rest.is_empty() { key } else { rest }))
    }

    /// The biz of `key`, checked for this connection's token, and its sequence if it is
    /// a sequence biz.
    async fn biz_of<'k>(
        &self,
        key: &'k str,
    ) -> Result<
        (
            BizTag,
            &'k str,
            Option<std::sync::Arc<crate::sequencer::SequenceBiz>>,
        ),
        Reply,
    > {
        let (biz, rest) = self.place(key)?;
        let sequence = self
            .service()
            .biz_for(&biz, self.token.as_deref())
            .await
            .map_err(refusal)?;
        Ok((biz, rest, sequence))
    }

    /// `INCR key` (`count` None) and `INCRBY key count`.
    async fn increment(&self, key: &str, count: Option<&str>) -> Reply {
        let incrby = count.is_some();
        let (biz, rest, sequence) = match self.biz_of(key).await {
            Ok(placed) => placed,
            Err(reply) => return reply,
        };
        let count = match count.map(str::parse::<i64>) {
            None => 1,
            Some(Ok(n)) if (1..=MAX_COUNT).contains(&n) => n,
            Some(_) => {
                return Reply::error(
                    "ERR",
                    format!("value is not an integer or out of range (1 to {MAX_COUNT})"),
                );
            }
        };
        let Some(sequence) = sequence else {
            // `INCRBY key 1` implies one number, which an ID is: client libraries send
            // it for their `incr` (redis-py's `incr(key)` is `INCRBY key 1`).
            if incrby && count != 1 {
                return Reply::error(
                    "WRONGTYPE",
                    format!(
                        "INCRBY takes a run of numbers of a sequence key; '{key}' is biz '{biz}' of IDs, which are not consecutive: take them with INCR or IDS"
                    ),
                );
            }
            return self.ids_reply(&biz, 1, false).await;
        };
        if crate::sequence::check_key(rest).is_err() {
            return Reply::error(
                "ERR",
                format!("key '{key}': a sequence key is 1 to 255 bytes"),
            );
        }
        let keys = [rest.to_owned()];
        match self
            .service()
            .take(&sequence, &keys, count, self.caller())
            .await
        {
            Ok(taken) => Reply::Integer(taken.first().map_or(0, |t| t.last)),
            Err(e) => refusal(e),
        }
    }

    /// `GET key`: a sequence key's current number.
    async fn get(&self, key: &str) -> Reply {
        let (biz, rest, sequence) = match self.biz_of(key).await {
            Ok(placed) => placed,
            Err(reply) => return reply,
        };
        let Some(sequence) = sequence else {
            return Reply::error(
                "WRONGTYPE",
                format!(
                    "GET reads a sequence key's number; '{key}' is biz '{biz}' of IDs, which has none to read"
                ),
            );
        };
        match self.service().current(&sequence, rest, self.caller()).await {
            Ok(n) => Reply::bulk(n.to_string()),
            Err(e) => refusal(e),
        }
    }

    /// `IDS key count`: `count` IDs of an ID biz, as an array.
    async fn ids(&self, key: &str, count: &str) -> Reply {
        let count = match BatchSize::parse("count", Some(count)) {
            Ok(n) => n.get(),
            Err(e) => return Reply::error("ERR", e),
        };
        let (biz, _, sequence) = match self.biz_of(key).await {
            Ok(placed) => placed,
            Err(reply) => return reply,
        };
        if sequence.is_some() {
            return Reply::error(
                "WRONGTYPE",
                format!(
                    "IDS takes IDs of an ID biz; '{key}' is a key of sequence biz '{biz}': take its numbers with INCR or INCRBY"
                ),
            );
        }
        self.ids_reply(&biz, count, true).await
    }

    /// `count` IDs of `biz`: an integer (or, for a formatted biz, a bulk string), or an
    /// array of them when `array`.
    async fn ids_reply(&self, biz: &BizTag, count: usize, array: bool) -> Reply {
        let (ids, shape) = match self.service().ordered_ids(biz, count).await {
            Ok(issued) => issued,
            Err(e) => return refusal(e),
        };
        let format = shape.as_ref().map(|s| &s.format).filter(|f| !f.is_plain());
        let one = |id: i64| match format {
            Some(f) => f.encode(id).map(Reply::bulk).unwrap_or_else(|e| {
                Reply::error("ERR", format!("id_space_exhausted: biz '{biz}': {e}"))
            }),
            None => Reply::Integer(id),
        };
        match array {
            true => Reply::Array(ids.into_iter().map(one).collect()),
            false => ids.first().map_or(Reply::Null, |&id| one(id)),
        }
    }
}

fn wrong_pass() -> Reply {
    Reply::error(
        "WRONGPASS",
        "invalid username-password pair or user is disabled.",
    )
}

/// The service's refusal as a Redis error, the one table of them: `NOAUTH` and
/// `NOPERM` for the token, `WRONGTYPE` for a command on the other kind of biz, else
/// `ERR` with the code.
fn refusal(e: Error) -> Reply {
    match &e {
        Error::Unauthorized(_) => Reply::error("NOAUTH", &e),
        Error::Forbidden(_) => Reply::error("NOPERM", &e),
        Error::Conflict {
            code: "sequence_biz" | "not_a_sequence",
            ..
        } => Reply::error("WRONGTYPE", &e),
        _ => Reply::error("ERR", format!("{}: {e}", e.code())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn commands_parse_into_values() {
        assert_eq!(
            parse(args(&["incr", "order_id"])),
            Ok(Command::Incr("order_id".into()))
        );
        assert_eq!(
            parse(args(&[
                "HELLO", "3", "AUTH", "default", "t", "SETNAME", "n"
            ])),
            Ok(Command::Hello {
                protocol: Some("3".into()),
                auth: Some(("default".into(), "t".into())),
                name: Some("n".into()),
            })
        );
        assert!(matches!(
            parse(args(&["incr"])),
            Err(Reply::Error(e)) if e == "ERR wrong number of arguments for 'incr' command"
        ));
        assert!(matches!(
            parse(args(&["SET", "a", "1"])),
            Err(Reply::Error(e)) if e.starts_with("ERR unknown command 'SET', with args beginning with: 'a' '1'")
        ));
        assert!(matches!(
            parse(args(&["HELLO", "3", "BOGUS"])),
            Err(Reply::Error(_))
        ));
        let key = vec![b"INCR".to_vec(), b"msg_seq:\xff".to_vec()];
        assert!(matches!(
            parse(key),
            Err(Reply::Error(e)) if e.starts_with("ERR key 'msg_seq:\\xff' is not valid UTF-8 (byte 0xff at offset 8)")
        ));
        let ping = vec![b"PING".to_vec(), b"\xff".to_vec()];
        assert_eq!(parse(ping), Ok(Command::Ping(Some(b"\xff".to_vec()))));
    }
}
