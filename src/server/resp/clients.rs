//! The connections open on the Redis listener and what `INFO` and `CLIENT` report of
//! them: each connection's entry (its id, addresses, name, last command), the counts
//! since the start, and the rate of commands.
//!
//! A connection's token decides who sees it: `CLIENT LIST` shows, and `CLIENT KILL`
//! closes, only the connections authenticated with the caller's token (by its digest).
//! A tenant's token cannot list or close another tenant's connections; `INFO` counts
//! every connection, a number that names none.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::biz::TokenDigest;

/// Every connection open, and the counts `INFO` reports.
pub(super) struct Clients {
    /// When the listener started: `uptime_in_seconds`, and the origin of each
    /// connection's times.
    pub started: Instant,
    /// The next connection's id: ids are never reused, as Redis's.
    next_id: AtomicU64,
    /// Connections accepted since the start (`total_connections_received`).
    received: AtomicU64,
    /// Commands answered since the start (`total_commands_processed`), added once per
    /// batch a connection answers, not once per command.
    commands: AtomicU64,
    /// The open connections by id. A plain mutex: nothing awaits while holding it, and
    /// it is taken on connect, close, `CLIENT LIST` and `CLIENT KILL` only.
    open: Mutex<BTreeMap<u64, Arc<Client>>>,
    /// The last samples of `commands`, for `instantaneous_ops_per_sec`.
    samples: Mutex<Samples>,
}

/// One open connection, as `CLIENT LIST` shows it.
pub(super) struct Client {
    pub id: u64,
    /// The client's address.
    pub addr: SocketAddr,
    /// The listener's address the client connected to.
    pub laddr: SocketAddr,
    /// The socket's file descriptor (`-1` where there is none to show).
    pub fd: i64,
    /// When it connected.
    pub created: Instant,
    /// What changes while it lives; a plain mutex, taken once per batch of commands.
    state: Mutex<State>,
    /// Set by `CLIENT KILL`: the connection runs no command after the one it is
    /// running.
    closing: AtomicBool,
    /// Woken by `CLIENT KILL`: a connection waiting for input closes.
    pub killed: Notify,
}

/// What a connection's commands change.
#[derive(Default, Clone)]
pub(super) struct State {
    /// The digest of the token `AUTH` accepted: who may see and close the connection.
    pub token: Option<TokenDigest>,
    pub name: Option<String>,
    /// `CLIENT SETINFO LIB-NAME` and `LIB-VER`.
    pub lib_name: Option<String>,
    pub lib_ver: Option<String>,
    /// The last command run, and when it came.
    pub cmd: Option<&'static str>,
    pub active: Option<Instant>,
    /// Commands queued since `MULTI`, or `None` outside a transaction.
    pub multi: Option<usize>,
    pub resp3: bool,
}

impl Client {
    /// Whether `CLIENT KILL` closed this connection.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// This connection's state, to read or change.
    pub fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it cannot leave the state half-written: every field is
        // written whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the last command of a batch.
    pub fn touch(&self, cmd: &'static str, multi: Option<usize>, now: Instant) {
        let mut state = self.state();
        state.cmd = Some(cmd);
        state.active = Some(now);
        state.multi = multi;
    }

    /// Whether a caller authenticated with `token` may see and close this connection.
    pub fn visible_to(&self, token: Option<&TokenDigest>) -> bool {
        token.is_some() && self.state().token.as_ref() == token
    }

    /// The connection's line of `CLIENT LIST` and `CLIENT INFO`, as Redis writes it
    /// (without the fields of memory and buffers, which segmint does not keep).
    pub fn line(&self, now: Instant) -> String {
        let state = self.state().clone();
        let age = now.saturating_duration_since(self.created).as_secs();
        let idle = now
            .saturating_duration_since(state.active.unwrap_or(self.created))
            .as_secs();
        let multi = state.multi.map_or(-1, |n| n as i64);
        let flags = if state.multi.is_some() { "x" } else { "N" };
        format!(
            "id={} addr={} laddr={} fd={} name={} age={age} idle={idle} flags={flags} db=0 sub=0 psub=0 ssub=0 multi={multi} cmd={} user=default redir=-1 resp={} lib-name={} lib-ver={}\n",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            state.name.as_deref().unwrap_or(""),
            state.cmd.unwrap_or("NULL"),
            if state.resp3 { 3 } else { 2 },
            state.lib_name.as_deref().unwrap_or(""),
            state.lib_ver.as_deref().unwrap_or(""),
        )
    }
}

/// Removes its connection from the open ones when the connection ends.
pub(super) struct Registered<'a> {
    clients: &'a Clients,
    pub client: Arc<Client>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.clients.remove(self.client.id);
    }
}

/// What `CLIENT KILL` closes: connections matching every filter given.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Filter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    /// Whether the caller itself is spared (`SKIPME yes`, the default of the filter
    /// form).
    pub skip_me: bool,
}

impl Clients {
    pub fn new() -> Clients {
        Clients {
            started: Instant::now(),
            next_id: AtomicU64::new(1),
            received: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            samples: Mutex::new(Samples::default()),
        }
    }

    fn open(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Client>>> {
        // Inserts and removes are whole: a panic elsewhere leaves the map consistent.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection; it is removed when the guard drops.
    pub fn register(&self, addr: SocketAddr, laddr: SocketAddr, fd: i64) -> Registered<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.received.fetch_add(1, Ordering::Relaxed);
        let client = Arc::new(Client {
            id,
            addr,
            laddr,
            fd,
            created: Instant::now(),
            state: Mutex::new(State::default()),
            closing: AtomicBool::new(false),
            killed: Notify::new(),
        });
        self.open().insert(id, client.clone());
        Registered {
            clients: self,
            client,
        }
    }

    fn remove(&self, id: u64) -> Option<Arc<Client>> {
        self.open().remove(&id)
    }

    /// Counts `n` commands answered.
    pub fn answered(&self, n: u64) {
        self.commands.fetch_add(n, Ordering::Relaxed);
    }

    /// `(connected_clients, total_connections_received, total_commands_processed)`.
    pub fn counts(&self) -> (usize, u64, u64) {
        (
            self.open().len(),
            self.received.load(Ordering::Relaxed),
            self.commands.load(Ordering::Relaxed),
        )
    }

    /// The open connections a caller with `token` may see, by id.
    pub fn visible(&self, token: Option<&TokenDigest>) -> Vec<Arc<Client>> {
        let open: Vec<Arc<Client>> = self.open().values().cloned().collect();
        open.into_iter().filter(|c| c.visible_to(token)).collect()
    }

    /// Closes the connections `token` may see that match `filter`, `me` being the
    /// caller's id; how many. Each is gone from the list at once and closes after its
    /// current batch of commands.
    pub fn kill(&self, filter: &Filter, token: Option<&TokenDigest>, me: u64) -> usize {
        let matching: Vec<u64> = self
            .visible(token)
            .into_iter()
            .filter(|c| {
                filter.id.is_none_or(|id| id == c.id)
                    && filter
                        .addr
                        .as_ref()
                        .is_none_or(|a| *a == c.addr.to_string())
                    && filter
                        .laddr
                        .as_ref()
                        .is_none_or(|a| *a == c.laddr.to_string())
                    && !(filter.skip_me && c.id == me)
            })
            .map(|c| c.id)
            .collect();
        let mut killed = 0;
        for id in matching {
            if let Some(client) = self.remove(id) {
                client.closing.store(true, Ordering::Relaxed);
                client.killed.notify_one();
                killed += 1;
            }
        }
        killed
    }

    /// Samples the commands answered every [`SAMPLE_EVERY`], for ever: what
    /// `instantaneous_ops_per_sec` is computed from, as Redis's cron samples it.
    pub async fn sample(&self) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = tick.tick().await.into_std();
            let commands = self.commands.load(Ordering::Relaxed);
            self.samples
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(now, commands);
        }
    }

    /// Commands a second over the last samples (about 1.6 s).
    pub fn ops_per_sec(&self) -> u64 {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rate()
    }
}

/// How often the rate of commands is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// How many samples the rate is computed over, as Redis's `STATS_METRIC_SAMPLES`.
const SAMPLES: usize = 16;

/// The last [`SAMPLES`] samples of the commands answered, oldest first.
#[derive(Default)]
struct Samples(std::collections::VecDeque<(Instant, u64)>);

impl Samples {
    fn add(&mut self, at: Instant, commands: u64) {
        if self.0.len() == SAMPLES {
            self.0.pop_front();
        }
        self.0.push_back((at, commands));
    }

    /// Commands a second between the oldest and the newest sample; 0 before two.
    fn rate(&self) -> u64 {
        match (self.0.front(), self.0.back()) {
            (Some(&(t0, c0)), Some(&(t1, c1))) if t1 > t0 => {
                let seconds = t1.duration_since(t0).as_secs_f64();
                (c1.saturating_sub(c0) as f64 / seconds).round() as u64
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_over_the_samples_kept() {
        let start = Instant::now();
        let mut samples = Samples::default();
        assert_eq!(samples.rate(), 0);
        for i in 0..40u64 {
            samples.add(start + SAMPLE_EVERY * i as u32, i * 50);
        }
        assert_eq!(samples.0.len(), SAMPLES);
        assert_eq!(samples.rate(), 500);
    }

    #[test]
    fn a_token_sees_and_kills_only_its_own_connections() {
        let clients = Clients::new();
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let [a, b, c] = [1, 2, 3].map(|p| clients.register(addr(p), addr(6379), -1));
        let (mine, theirs) = ([1u8; 32], [2u8; 32]);
        a.client.state().token = Some(mine);
        b.client.state().token = Some(mine);
        c.client.state().token = Some(theirs);
        let ids = |v: Vec<Arc<Client>>| v.iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(clients.visible(Some(&mine))), [1, 2]);
        assert_eq!(ids(clients.visible(None)), Vec::<u64>::new());
        let other = Filter {
            id: Some(3),
            ..Filter::default()
        };
        assert_eq!(clients.kill(&other, Some(&mine), 1), 0, "another token's");
        let by_addr = Filter {
            addr: Some("127.0.0.1:2".into()),
            skip_me: true,
            ..Filter::default()
        };
        assert_eq!(clients.kill(&by_addr, Some(&mine), 2), 0, "skip me");
        assert_eq!(clients.kill(&by_addr, Some(&mine), 1), 1);
        assert_eq!(clients.counts().0, 2);
        drop(b);
        assert_eq!(clients.counts(), (2, 3, 0), "removed once");
    }
}
