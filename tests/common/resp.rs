//! Servers with a Redis listener, for the tests of the Redis protocol (`tests/resp.rs`,
//! `tests/resp_clients.rs`): their databases, bizs and tokens, and requests by
//! `redis-cli` and by raw socket.

use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::cli::{config_file, segmint_ok};
use super::{Databases, Kind, ServerProcess, config_toml_urls, free_port};

/// Databases, bizs `order` (IDs), `chat` and `counter` (sequences) and `other` (IDs),
/// a token for each, and the configuration of a server with a Redis listener.
pub struct Setup {
    _dbs: Databases,
    _file: tempfile::NamedTempFile,
    /// The configuration without the listener's address, which each server adds.
    toml: String,
    pub tokens: std::collections::HashMap<&'static str, String>,
}

impl Setup {
    pub fn start(kind: Kind) -> Setup {
        let dbs = Databases::start(kind, 1);
        let toml = config_toml_urls(&dbs.urls(), "");
        let file = config_file(&toml);
        let cli = |args: &[&str]| segmint_ok(file.path(), args, &[]);
        cli(&["migrate"]);
        cli(&["biz", "add", "order", "--step", "100"]);
        cli(&["biz", "add", "other", "--step", "100"]);
        cli(&["biz", "add", "chat", "--sequence", "--step", "100"]);
        cli(&["biz", "add", "counter", "--sequence", "--step", "1000"]);
        // IDs by the hundred thousand without a reservation each.
        cli(&["biz", "add", "bulk", "--step", "10000000"]);
        let tokens = ["order", "other", "chat", "counter", "bulk"]
            .into_iter()
            .map(|biz| (biz, cli(&["token", "add", "--biz", biz]).trim().to_owned()))
            .collect();
        Setup {
            _dbs: dbs,
            _file: file,
            toml,
            tokens,
        }
    }

    /// A server whose Redis listener is on a port of its own; the port.
    pub async fn server(&self) -> (ServerProcess, u16) {
        self.server_with("").await
    }

    /// [`Setup::server`] with `extra` keys of `[resp]` (`, max_queued = 3`).
    pub async fn server_with(&self, extra: &str) -> (ServerProcess, u16) {
        let port = free_port();
        let resp = format!(
            "resp = {{ bind = \"127.0.0.1:{port}\", threads = {RESP_THREADS}, keys = {{ \"order_id\" = \"order\", \"msg_seq:\" = \"chat\" }}{extra} }}\n"
        );
        (
            ServerProcess::start(&format!("{resp}{}", self.toml)).await,
            port,
        )
    }
}

/// Threads of every test server's Redis listener: more than this machine's cores, so
/// that connections are dealt to several.
pub const RESP_THREADS: usize = 3;

/// `redis-cli -p PORT [-a TOKEN] ARGS…`'s output, trimmed.
pub fn cli(port: u16, token: Option<&str>, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-p", &port.to_string()]);
    if let Some(token) = token {
        cmd.args(["-a", token, "--no-auth-warning"]);
    }
    let out = cmd
        .args(args)
        .output()
        .expect("redis-cli (Debian's redis-tools)");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Sends `request` on a new connection and reads until `replies` lines came back (or
/// the server closed); the text read.
pub async fn exchange(port: u16, request: &[u8], lines: usize) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65_536];
    while got.iter().filter(|&&b| b == b'\n').count() < lines {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            other => panic!("read: {other:?} after {:?}", String::from_utf8_lossy(&got)),
        }
    }
    String::from_utf8(got).unwrap()
}

/// A command as a client library sends it.
pub fn command(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    command_bytes(&args)
}

/// [`command`], of arguments that may be any bytes.
pub fn command_bytes(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A connection kept open: a command at a time, each reply read whole.
pub struct Connection {
    stream: TcpStream,
    /// Bytes read past the last reply.
    buf: Vec<u8>,
}

impl Connection {
    /// Connects to `port`, authenticated with `token` when given.
    pub async fn open(port: u16, token: Option<&str>) -> Connection {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut connection = Connection {
            stream,
            buf: Vec::new(),
        };
        if let Some(token) = token {
            assert_eq!(connection.call(&["AUTH", token]).await, "+OK\r\n");
        }
        connection
    }

    /// This side's address, as the server's `CLIENT LIST` shows it (`addr=`).
    pub fn addr(&self) -> String {
        self.stream.local_addr().unwrap().to_string()
    }

    /// Sends a command; its reply, as sent.
    pub async fn call(&mut self, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.call_bytes(&args).await
    }

    /// [`Connection::call`] of arguments that may be any bytes.
    pub async fn call_bytes(&mut self, args: &[&[u8]]) -> String {
        self.stream.write_all(&command_bytes(args)).await.unwrap();
        loop {
            if let Some(end) = reply_end(&self.buf, 0) {
                let reply: Vec<u8> = self.buf.drain(..end).collect();
                return String::from_utf8_lossy(&reply).into_owned();
            }
            match self.read().await {
                Some(0) => panic!("closed after {:?}", String::from_utf8_lossy(&self.buf)),
                Some(_) => {}
                None => panic!(
                    "no reply within 10 s: {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        }
    }

    /// Bytes read, 0 at the end of the stream, `None` after 10 s.
    async fn read(&mut self) -> Option<usize> {
        self.buf.reserve(65_536);
        let read = self.stream.read_buf(&mut self.buf);
        match tokio::time::timeout(Duration::from_secs(10), read).await {
            Ok(Ok(n)) => Some(n),
            Ok(Err(_)) => Some(0),
            Err(_) => None,
        }
    }

    /// Whether the server closed the connection (within 10 s, reading what remains).
    pub async fn closed(&mut self) -> bool {
        loop {
            match self.read().await {
                Some(0) => return true,
                Some(_) => {}
                None => return false,
            }
        }
    }
}

/// Where the reply starting at `buf[at]` ends, when it is whole.
fn reply_end(buf: &[u8], at: usize) -> Option<usize> {
    let line = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&buf[at + 1..line]).ok()?;
    let after = line + 2;
    match buf[at] {
        b'$' | b'=' | b'!' => match head.parse::<i64>().ok()? {
            -1 => Some(after),
            n => {
                let end = after + usize::try_from(n).ok()? + 2;
                (buf.len() >= end).then_some(end)
            }
        },
        b'*' | b'~' | b'%' => {
            let n: i64 = head.parse().ok()?;
            let items = if buf[at] == b'%' { n * 2 } else { n };
            (0..items.max(0)).try_fold(after, |at, _| reply_end(buf, at))
        }
        _ => Some(after),
    }
}
