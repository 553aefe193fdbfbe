//! The Redis protocol: Redis clients, unchanged, take IDs with `INCR order_id` and a
//! sequence's numbers with `INCR msg_seq:1041`, served by the same process and the same
//! ID cache as HTTP. Off unless `[resp] bind` is set.
//!
//! Each connection reads what the client sent, answers every whole command in it in
//! order (pipelining: many commands, one write), and waits for more. A command before
//! `AUTH` (or `HELLO … AUTH`) is refused with `-NOAUTH`; an unknown command gets `-ERR`
//! and the connection stays; a request that cannot be framed gets `-ERR Protocol error`
//! and the connection is closed, as Redis does. See `docs/redis.md`.

mod codec;
mod command;

use std::sync::Arc;

use actix_web::web;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::AppState;
use crate::config::RespConfig;
use crate::metrics::RespMetrics;
pub use codec::Reply;
use command::Session;

/// What every connection shares.
pub(super) struct Shared {
    pub state: web::Data<AppState>,
    pub config: RespConfig,
    pub metrics: RespMetrics,
}

/// Accepts connections on `listener` until dropped (the connections' tasks with it).
pub(super) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, shared.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "resp: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so that the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves one connection until the client closes it, sends `QUIT`, or breaks the
/// protocol.
async fn connection(mut stream: TcpStream, shared: Arc<Shared>) {
    // Answers go out as soon as they are written, as the HTTP server's do.
    let _ = stream.set_nodelay(true);
    shared.metrics.connection(1);
    let mut session = Session::new(&shared);
    let mut input: Vec<u8> = Vec::with_capacity(4_096);
    let mut output: Vec<u8> = Vec::with_capacity(4_096);
    loop {
        let mut used = 0;
        let mut close = false;
        loop {
            match codec::parse(&input[used..]) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    let (reply, quit) = session.run(args).await;
                    reply.write(session.resp3(), &mut output);
                    if quit {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    Reply::error("ERR", e).write(session.resp3(), &mut output);
                    close = true;
                    break;
                }
            }
        }
        input.drain(..used);
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                break;
            }
            output.clear();
        }
        if close {
            break;
        }
        match stream.read_buf(&mut input).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    shared.metrics.connection(-1);
}
