//! The Redis protocol: Redis clients, unchanged, take IDs with `INCR order_id` and a
//! sequence's numbers with `INCR msg_seq:1041`, served by the same process and the same
//! ID cache as HTTP. Off unless `[resp] bind` is set.
//!
//! Each connection reads what the client sent, answers every whole command in it in
//! order (pipelining: many commands, one write), and waits for more. A command before
//! `AUTH` (or `HELLO … AUTH`) is refused with `-NOAUTH`; an unknown command gets `-ERR`
//! and the connection stays; a request that cannot be framed gets `-ERR Protocol error`
//! and the connection is closed, as Redis does. Connections are served by `[resp]
//! threads` of their own, not by the HTTP workers ([`start`]). See `docs/redis.md`.

mod client;
mod clients;
mod codec;
mod command;
mod info;
mod table;

use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::RespConfig;
use crate::metrics::RespMetrics;
use crate::service::Service;
use clients::Clients;
pub use codec::Reply;
use command::Session;
use info::Host;

/// What every connection shares.
pub(super) struct Shared {
    pub service: Arc<Service>,
    pub config: RespConfig,
    pub metrics: RespMetrics,
    /// The connections open, and the counts `INFO` reports.
    clients: Clients,
    host: Host,
}

impl Shared {
    /// What the connections of the listener on `port` share.
    pub fn new(
        service: Arc<Service>,
        config: RespConfig,
        metrics: RespMetrics,
        port: u16,
    ) -> Shared {
        Shared {
            host: Host::new(port, config.max_clients),
            service,
            config,
            metrics,
            clients: Clients::new(),
        }
    }
}

/// The listener's threads; dropping it stops them (and closes their connections).
pub(super) struct Threads {
    stop: Option<watch::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Threads {
    fn drop(&mut self) {
        // Every thread's loop ends when the sender is gone.
        drop(self.stop.take());
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Serves `listener` on `n` threads (at least one) of their own, each a single-threaded
/// runtime that serves the connections dealt to it for their whole life: the first
/// thread also accepts, and deals connections in turn. A thread answers its ready
/// connections' commands before it writes their replies (see [`connection`]), as one
/// event loop does.
///
/// # Errors
/// When a runtime or a thread cannot be made.
pub(super) fn start(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    n: usize,
) -> std::io::Result<Threads> {
    let (stop, stopped) = watch::channel(());
    let (deal, dealt): (Vec<_>, Vec<_>) = (0..n.max(1)).map(|_| mpsc::unbounded_channel()).unzip();
    let mut acceptor = Some((listener, deal));
    let mut threads = Vec::with_capacity(dealt.len());
    for (i, dealt) in dealt.into_iter().enumerate() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // The first thread accepts and deals to all (itself too), and samples the
        // rate of commands.
        let acceptor = acceptor.take();
        let shared = shared.clone();
        let mut stopped = stopped.clone();
        let thread = std::thread::Builder::new()
            .name(format!("segmint-resp-{i}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let sampled = shared.clone();
                    let accepting = async move {
                        match acceptor {
                            // Sampling never ends: the thread stops when the
                            // acceptor does.
                            Some((listener, deal)) => tokio::select! {
                                () = accept(listener, deal) => {}
                                () = sampled.clients.sample() => {}
                            },
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = serve(dealt, shared) => {}
                        () = accepting => {}
                        _ = stopped.changed() => {}
                    }
                });
            })?;
        threads.push(thread);
    }
    Ok(Threads {
        stop: Some(stop),
        threads,
    })
}

/// Accepts connections and deals them to the threads in turn.
async fn accept(
    listener: std::net::TcpListener,
    deal: Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(error = %e, "resp: cannot listen");
            return;
        }
    };
    for turn in (0..deal.len()).cycle() {
        match listener.accept().await {
            // A tokio stream belongs to the runtime that made it: the thread that
            // serves it makes its own.
            Ok((stream, _)) => match stream.into_std() {
                Ok(stream) => {
                    let _ = deal[turn].send(stream);
                }
                Err(e) => tracing::warn!(error = %e, "resp: cannot pass a connection on"),
            },
            Err(e) => {
                tracing::warn!(error = %e, "resp: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves the connections dealt to this thread until the dealer is gone (the
/// connections' tasks end with the returned future).
async fn serve(mut dealt: mpsc::UnboundedReceiver<std::net::TcpStream>, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            stream = dealt.recv() => match stream.map(TcpStream::from_std) {
                Some(Ok(stream)) => {
                    connections.spawn(connection(stream, shared.clone()));
                }
                Some(Err(e)) => tracing::warn!(error = %e, "resp: cannot serve a connection"),
                None => return,
            },
            // Reap finished connections so that the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Registers a connection with the others: its id, addresses and descriptor.
fn register<'a>(stream: &TcpStream, shared: &'a Shared) -> clients::Registered<'a> {
    let unknown = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    #[cfg(unix)]
    let fd = i64::from(std::os::fd::AsRawFd::as_raw_fd(stream));
    #[cfg(not(unix))]
    let fd = -1;
    shared.clients.register(
        stream.peer_addr().unwrap_or(unknown),
        stream.local_addr().unwrap_or(unknown),
        fd,
    )
}

/// The replies a connection holds before it writes them and answers the next commands
/// read: a client that pipelines large `IDS` without reading its replies makes the
/// server wait on the socket, not hold the replies of everything it sent.
const FLUSH_AT: usize = 1 << 20;

/// Serves one connection until the client closes it, sends `QUIT`, breaks the
/// protocol, or `CLIENT KILL` closes it.
async fn connection(mut stream: TcpStream, shared: Arc<Shared>) {
    // Answers go out as soon as they are written, as the HTTP server's do.
    let _ = stream.set_nodelay(true);
    shared.metrics.connection(1);
    let registered = register(&stream, &shared);
    if shared.clients.counts().0 > shared.host.max_clients {
        // As Redis answers a connection past `maxclients`.
        tracing::warn!(
            max = shared.host.max_clients,
            "resp: a connection past resp.max_clients refused"
        );
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        drop(registered);
        shared.metrics.connection(-1);
        return;
    }
    let me = registered.client.clone();
    let mut session = Session::new(&shared, me.clone());
    let mut input: Vec<u8> = Vec::with_capacity(4_096);
    let mut output: Vec<u8> = Vec::with_capacity(4_096);
    loop {
        let mut used = 0;
        let mut close = false;
        let mut answered = 0;
        // Set when the replies reached `FLUSH_AT` with commands still read: they are
        // answered once the replies are out, without waiting for more input.
        let mut more = false;
        loop {
            if output.len() >= FLUSH_AT {
                more = true;
                break;
            }
            match codec::parse(&input[used..]) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    let (reply, quit) = session.run(args).await;
                    reply.write(session.resp3(), &mut output);
                    answered += 1;
                    if quit || me.closing() {
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
        if answered > 0 {
            shared.clients.answered(answered);
            session.touch(Instant::now());
        }
        if !output.is_empty() {
            // The thread's other connections whose commands have come are answered
            // before this one's replies go out: a write wakes the client, which then
            // competes for the core; an event loop's worth of commands between writes
            // costs fewer switches per command than a write after each.
            tokio::task::yield_now().await;
            // A client that reads nothing can be closed by `CLIENT KILL` while its
            // replies wait; the replies go first when they can (a connection that
            // closed itself still gets its answer).
            let wrote = tokio::select! {
                biased;
                wrote = stream.write_all(&output) => wrote,
                () = me.killed.notified() => break,
            };
            if wrote.is_err() {
                break;
            }
            output.clear();
        }
        if close {
            break;
        }
        if more {
            continue;
        }
        tokio::select! {
            biased;
            () = me.killed.notified() => break,
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
        }
    }
    drop(registered);
    shared.metrics.connection(-1);
}
