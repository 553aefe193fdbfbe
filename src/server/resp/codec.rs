//! The Redis serialization protocol (RESP2, and RESP3 after `HELLO 3`), as far as a
//! server of counters needs it: requests are arrays of bulk strings (what every client
//! library sends) or inline commands (a line of words, as typed into telnet); replies
//! are simple strings, errors, integers, bulk strings, arrays, maps and null.

/// The most arguments one command may have (`IDS` and `HELLO` need a handful; a batch
/// of keys is sent as many commands, pipelined).
pub const MAX_ARGS: usize = 1_024;

/// The longest argument, in bytes (a key is at most 255; a token 64 hex digits).
pub const MAX_ARG_BYTES: usize = 4_096;

/// The longest inline command line.
const MAX_INLINE: usize = 16 * 1_024;

/// A request that breaks the protocol: answered with `-ERR Protocol error: …`, and the
/// connection closed, as Redis does (the rest of the stream cannot be framed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

/// A command's arguments and the bytes it took, or `None` for a command not yet whole.
pub type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError>;

/// Parses one command from the front of `buf`: its arguments and the bytes it took, or
/// `None` when `buf` does not hold a whole command yet.
///
/// # Errors
/// [`ProtocolError`] when the bytes cannot be a command.
pub fn parse(buf: &[u8]) -> Parsed {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array(buf),
        Some(_) => parse_inline(buf),
    }
}

/// The line at `buf[at..]` without its `\r\n`, and where the next one starts.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let end = buf[at..].windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[at..at + end], at + end + 2))
}

/// A length after a `*` or `$` marker: decimal digits, within `max`.
fn length(digits: &[u8], max: usize, what: &str) -> Result<usize, ProtocolError> {
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<usize>().ok())
        .filter(|&n| n <= max)
        .ok_or_else(|| ProtocolError(format!("invalid {what} length")))
}

fn parse_array(buf: &[u8]) -> Parsed {
    let Some((head, mut at)) = line(buf, 0) else {
        return too_long(buf, MAX_INLINE, "multibulk length");
    };
    let count = length(&head[1..], MAX_ARGS, "multibulk")?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                char::from(buf[at])
            )));
        }
        let Some((head, start)) = line(buf, at) else {
            return too_long(&buf[at..], 32, "bulk length");
        };
        let len = length(&head[1..], MAX_ARG_BYTES, "bulk")?;
        let end = start + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError("a bulk string not ended by CRLF".into()));
        }
        args.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Ok(Some((args, at)))
}

/// Incomplete input that is already longer than any valid head could be.
fn too_long<T>(buf: &[u8], max: usize, what: &str) -> Result<Option<T>, ProtocolError> {
    match buf.len() > max {
        true => Err(ProtocolError(format!("too big {what}"))),
        false => Ok(None),
    }
}

fn parse_inline(buf: &[u8]) -> Parsed {
    let end = match buf.iter().position(|&b| b == b'\n') {
        Some(end) => end,
        None => return too_long(buf, MAX_INLINE, "inline request"),
    };
    let text = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    let args: Vec<Vec<u8>> = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if args.len() > MAX_ARGS || args.iter().any(|a| a.len() > MAX_ARG_BYTES) {
        return Err(ProtocolError("too big inline request".into()));
    }
    Ok(Some((args, end + 1)))
}

/// A reply, written as RESP2 or RESP3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(&'static str),
    /// An error line: its first word is the code (`ERR`, `NOAUTH`, `WRONGTYPE`…).
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    /// RESP2's null bulk string, RESP3's null.
    Null,
    Array(Vec<Reply>),
    /// RESP3's map; a flat array of keys and values in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// RESP3's set; an array in RESP2.
    Set(Vec<Reply>),
    /// RESP3's verbatim text (`=`, marked `txt`); a bulk string in RESP2. What Redis
    /// answers `INFO` and `CLIENT LIST` with.
    Text(String),
}

impl Reply {
    /// An error reply whose first word is `code`.
    pub fn error(code: &str, message: impl std::fmt::Display) -> Reply {
        // A line break would end the reply early and desynchronise the client.
        let text = format!("{code} {message}").replace(['\r', '\n'], " ");
        Reply::Error(text)
    }

    pub fn bulk(text: impl Into<String>) -> Reply {
        Reply::Bulk(text.into().into_bytes())
    }

    /// Appends the reply to `out`, as RESP3 when `resp3`.
    pub fn write(&self, resp3: bool, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
            }
            Reply::Error(e) => {
                out.push(b'-');
                out.extend_from_slice(e.as_bytes());
            }
            Reply::Integer(n) => {
                out.push(b':');
                out.extend_from_slice(n.to_string().as_bytes());
            }
            Reply::Bulk(b) => bulk(b, out),
            Reply::Null if resp3 => out.push(b'_'),
            Reply::Null => out.extend_from_slice(b"$-1"),
            Reply::Text(text) if resp3 => {
                out.push(b'=');
                out.extend_from_slice((text.len() + 4).to_string().as_bytes());
                out.extend_from_slice(b"\r\ntxt:");
                out.extend_from_slice(text.as_bytes());
            }
            Reply::Text(text) => bulk(text.as_bytes(), out),
            Reply::Array(items) | Reply::Set(items) => {
                let marker = match (self, resp3) {
                    (Reply::Set(_), true) => b'~',
                    _ => b'*',
                };
                out.push(marker);
                out.extend_from_slice(items.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for item in items {
                    item.write(resp3, out);
                }
                return;
            }
            Reply::Map(pairs) => {
                let (marker, n) = match resp3 {
                    true => (b'%', pairs.len()),
                    false => (b'*', pairs.len() * 2),
                };
                out.push(marker);
                out.extend_from_slice(n.to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for (k, v) in pairs {
                    k.write(resp3, out);
                    v.write(resp3, out);
                }
                return;
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A bulk string's head and bytes (without the final CRLF).
fn bulk(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'$');
    out.extend_from_slice(bytes.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn arrays_of_bulk_strings_and_inline_commands() {
        let req = b"*2\r\n$4\r\nINCR\r\n$8\r\norder_id\r\n*1\r\n$4\r\nPING\r\n";
        let (first, used) = parse(req).unwrap().unwrap();
        assert_eq!(first, args(&["INCR", "order_id"]));
        let (second, rest) = parse(&req[used..]).unwrap().unwrap();
        assert_eq!((second, used + rest), (args(&["PING"]), req.len()));
        assert_eq!(
            parse(b"incr  order_id\r\nPING").unwrap(),
            Some((args(&["incr", "order_id"]), 16))
        );
        assert_eq!(parse(b"\r\n").unwrap(), Some((vec![], 2)), "an empty line");
    }

    #[test]
    fn a_command_cut_anywhere_waits_for_the_rest() {
        let req = b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$5\r\ntoken\r\n";
        for cut in 0..req.len() {
            assert_eq!(parse(&req[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert!(parse(req).unwrap().is_some());
    }

    #[test]
    fn what_cannot_be_framed_is_a_protocol_error() {
        for bad in [
            &b"*x\r\n"[..],
            b"*-1\r\n",
            b"*2000\r\n",
            b"*1\r\n:5\r\n",
            b"*1\r\n$99999\r\n",
            b"*1\r\n$3\r\nabcd\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(
            parse(&[b'a'; MAX_INLINE + 1]).is_err(),
            "a line without end"
        );
    }

    #[test]
    fn replies_in_both_protocols() {
        let text = |r: &Reply, resp3| {
            let mut out = Vec::new();
            r.write(resp3, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(text(&Reply::Integer(-7), false), ":-7\r\n");
        assert_eq!(text(&Reply::Null, false), "$-1\r\n");
        assert_eq!(text(&Reply::Null, true), "_\r\n");
        assert_eq!(text(&Reply::bulk("42"), false), "$2\r\n42\r\n");
        let map = Reply::Map(vec![(Reply::bulk("proto"), Reply::Integer(3))]);
        assert_eq!(text(&map, true), "%1\r\n$5\r\nproto\r\n:3\r\n");
        assert_eq!(text(&map, false), "*2\r\n$5\r\nproto\r\n:3\r\n");
        let info = Reply::Text("# Server\r\n".into());
        assert_eq!(text(&info, true), "=14\r\ntxt:# Server\r\n\r\n");
        assert_eq!(text(&info, false), "$10\r\n# Server\r\n\r\n");
        let set = Reply::Set(vec![Reply::Simple("fast")]);
        assert_eq!(text(&set, true), "~1\r\n+fast\r\n");
        assert_eq!(text(&set, false), "*1\r\n+fast\r\n");
        let nested = Reply::Array(vec![Reply::Integer(1), Reply::Array(vec![])]);
        assert_eq!(text(&nested, false), "*2\r\n:1\r\n*0\r\n");
        assert_eq!(
            text(&Reply::error("ERR", "two\r\nlines"), false),
            "-ERR two  lines\r\n"
        );
    }
}
