//! The application's assembly: which routes each address serves, the listeners (HTTP,
//! the operator's and Leaf's addresses, the Redis protocol), the background tasks, and
//! the graceful stop.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::{Server, ServerHandle};
use actix_web::web;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer};
use futures_util::future::{join, join_all};

use super::base::AppState;
use super::forward::HttpForward;
use super::handed_out::{HANDED_OUT_CAPACITY, HandedOut};
use super::observe::{self, InFlight, Observer};
use super::{compat, leaf, openapi, resp, sequences, snowflake, status, v1};

use crate::cache::{Cache, GIVE_BACK_LIMIT};
use crate::config::{Config, OperatorToken};
use crate::listing::Names;
use crate::sequencer::Sequencer;
use crate::service::Service;
use crate::store::{OpenMode, Store, StoreError};
use crate::worker::Worker;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot listen on {bind} (`{key}`): {source}")]
    Bind {
        /// The configuration key of the address: `bind`, `operator_bind` or `leaf.bind`.
        key: &'static str,
        /// The address.
        bind: String,
        /// Why it could not be bound.
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every route with its data and the answer for unmatched paths: what each HTTP
/// worker's `App` is made of.
#[derive(Clone)]
pub struct Routes {
    state: web::Data<AppState>,
    observer: Observer,
    max_body: usize,
    /// What the operator routes require, if anything.
    operator_token: Option<OperatorToken>,
}

/// Which routes one address serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serves {
    /// All of them: `bind` without an `operator_bind`.
    Everything,
    /// All but the operator routes: `bind` beside an `operator_bind`.
    Public,
    /// The operator routes and `/healthz`: `operator_bind`.
    Operator,
    /// Leaf's routes and `/healthz`: `leaf.bind`.
    Leaf,
}

impl Routes {
    /// Adds every route to `cfg` (`App::new().configure(|cfg| routes.configure(cfg))`).
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        self.configure_for(cfg, Serves::Everything);
    }

    /// Adds the routes of `serves` to `cfg`; any other path gets the unmatched answer.
    fn configure_for(&self, cfg: &mut web::ServiceConfig, serves: Serves) {
        let observer = &self.observer;
        cfg.app_data(self.state.clone())
            .app_data(web::PayloadConfig::new(self.max_body));
        // Routes are matched in this order: the ID routes first, the dynamic `{biz}`
        // patterns (regular expressions) after the constant ones.
        let leaf = &self.state.leaf;
        let public = matches!(serves, Serves::Everything | Serves::Public);
        if public {
            cfg.configure(|cfg| compat::routes(cfg, observer))
                .configure(|cfg| v1::routes(cfg, observer))
                .configure(|cfg| snowflake::v1_routes(cfg, observer))
                .configure(|cfg| sequences::routes(cfg, observer));
        }
        // Leaf's routes take no token: served only when enabled, on `leaf.bind` alone
        // when that is set.
        if leaf.enabled && (serves == Serves::Leaf || public && leaf.bind.is_none()) {
            cfg.configure(|cfg| leaf::routes(cfg, observer));
        }
        v1::health(cfg, observer);
        if matches!(serves, Serves::Everything | Serves::Operator) {
            status::routes(cfg, observer, self.operator_token.as_ref());
        }
        if public {
            openapi::routes(cfg, observer);
        }
        cfg.default_service(web::to(not_found).wrap(observer.route(observe::UNMATCHED)));
    }
}

/// The server of `operator_bind` or `leaf.bind`.
struct SideServer {
    /// The port it listens on (the one chosen when the address says port 0).
    port: u16,
    server: Server,
}

/// A bound, configured server, not yet running.
pub struct Application {
    port: u16,
    server: Server,
    /// Serves the operator routes on their own address, when `operator_bind` is set;
    /// stopped with `server`.
    operator: Option<SideServer>,
    /// Serves Leaf's routes on their own address, when `leaf.bind` is set and they are
    /// enabled; stopped with `server`.
    leaf: Option<SideServer>,
    /// What the workers serve; also the state and the in-flight count (for the
    /// graceful stop) the application reads itself.
    routes: Routes,
    /// Stops the periodic catalog refresh when the application goes away.
    _refresher: AbortOnDrop,
    /// Stops the sampling of issue rates likewise.
    _sampler: AbortOnDrop,
    /// Leases and renews the snowflake worker ID, when snowflake IDs are enabled;
    /// stopped before the lease is released.
    leaser: Option<AbortOnDrop>,
    /// Keeps this server's presence and its sequence sections; stopped before they are
    /// released.
    sequencing: AbortOnDrop,
    /// The Redis-protocol listener's port and task, when `[resp] bind` is set.
    resp: Option<(u16, resp::Threads)>,
}

impl Application {
    /// Binds `config.bind` (and `config.operator_bind`, if set) and builds the
    /// application; missing embedded files are created only as `mode` allows.
    ///
    /// # Errors
    /// [`StartupError`] when an address cannot be bound, the pools not built or an
    /// embedded file not opened.
    pub async fn build(config: Config, mode: OpenMode) -> Result<Application, StartupError> {
        let listener = bind("bind", &config.bind)?;
        let operator = operator_listener(&config)?;
        Self::start(config, listener, operator, mode).await
    }

    /// Builds the application on an already bound listener (tests bind port 0), with
    /// stores set up beforehand: missing embedded files are created. An
    /// `operator_bind` of the configuration is bound here.
    ///
    /// # Errors
    /// [`StartupError`] when the pools cannot be built or `operator_bind` not bound.
    pub async fn with_listener(
        config: Config,
        listener: TcpListener,
    ) -> Result<Application, StartupError> {
        let operator = operator_listener(&config)?;
        Self::start(config, listener, operator, OpenMode::Create).await
    }

    /// As [`Application::with_listener`], with the operator routes served on `operator`
    /// alone (whatever `config.operator_bind` says).
    ///
    /// # Errors
    /// [`StartupError`] when the pools cannot be built.
    pub async fn with_listeners(
        config: Config,
        listener: TcpListener,
        operator: TcpListener,
    ) -> Result<Application, StartupError> {
        Self::start(config, listener, Some(operator), OpenMode::Create).await
    }

    async fn start(
        config: Config,
        listener: TcpListener,
        operator: Option<TcpListener>,
        mode: OpenMode,
    ) -> Result<Application, StartupError> {
        let port = local_port("bind", &config.bind, &listener)?;
        let (service, tasks) = service(&config, port, mode)?;
        let state = web::Data::new(AppState {
            service: Arc::new(service),
            preload_percent: config.preload_percent,
            handed_out: parking_lot::Mutex::new(HandedOut::new(HANDED_OUT_CAPACITY)),
            leaf: config.leaf.clone(),
        });
        let observer = Observer {
            in_flight: InFlight::default(),
            metrics: state.store.metrics().clone(),
        };
        let routes = Routes {
            state,
            observer,
            max_body: config.max_body_bytes,
            operator_token: config.operator_token.clone(),
        };
        let operator = match operator {
            None => None,
            Some(listener) => {
                let bind = config.operator_bind.as_deref().unwrap_or_default();
                Some((local_port("operator_bind", bind, &listener)?, listener))
            }
        };
        let leaf = match config.leaf.bind.as_deref().filter(|_| config.leaf.enabled) {
            None => None,
            Some(address) => {
                let listener = bind("leaf.bind", address)?;
                Some((local_port("leaf.bind", address, &listener)?, listener))
            }
        };
        let resp = resp_listener(&config, &routes.state.service)?;
        let serves = match operator {
            None => Serves::Everything,
            Some(_) => Serves::Public,
        };
        let server = serve(&config, &routes, serves, config.workers, listener)?;
        let operator = match operator {
            None => None,
            Some((port, listener)) => {
                // Operators' requests are few: one worker serves them, beside the
                // workers of the ID routes rather than among them.
                let server = serve(&config, &routes, Serves::Operator, 1, listener)?;
                Some(SideServer { port, server })
            }
        };
        let leaf = match leaf {
            None => None,
            Some((port, listener)) => {
                let server = serve(&config, &routes, Serves::Leaf, config.workers, listener)?;
                Some(SideServer { port, server })
            }
        };
        tracing::info!(
            port,
            operator_port = operator.as_ref().map(|o| o.port),
            leaf_port = leaf.as_ref().map(|l| l.port),
            resp_port = resp.as_ref().map(|r| r.0),
            leaf_routes = config.leaf.enabled,
            operator_token = config.operator_token.is_some(),
            databases = ?config.databases,
            "segmint listening"
        );
        Ok(Application {
            port,
            server,
            operator,
            leaf,
            routes,
            _refresher: tasks.refresher,
            _sampler: tasks.sampler,
            leaser: tasks.leaser,
            sequencing: tasks.sequencing,
            resp,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port of `operator_bind`, when the operator routes have their own address.
    pub fn operator_port(&self) -> Option<u16> {
        self.operator.as_ref().map(|o| o.port)
    }

    /// The port of `[resp] bind`, when the Redis protocol is served.
    pub fn resp_port(&self) -> Option<u16> {
        self.resp.as_ref().map(|r| r.0)
    }

    /// The port of `leaf.bind`, when Leaf's routes have their own address.
    pub fn leaf_port(&self) -> Option<u16> {
        self.leaf.as_ref().map(|l| l.port)
    }

    /// Stops the server from elsewhere (graceful unless told otherwise); the operator
    /// and Leaf addresses, if any, stop with it.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    pub fn state(&self) -> web::Data<AppState> {
        self.routes.state.clone()
    }

    /// The routes the workers serve, for serving them without a socket
    /// (`actix_web::test::init_service`), as the in-process benchmarks do.
    pub fn routes(&self) -> Routes {
        self.routes.clone()
    }

    /// Serves until `shutdown` completes (or the handle stops it), then stops
    /// gracefully: no new connections, in-flight requests finish. Once `shutdown` has
    /// completed, returns within [`STOP_LIMIT`] even if an HTTP worker is stuck: the
    /// workers get [`DRAIN_TIMEOUT`] and [`WORKER_STOP_GRACE`], the give-back
    /// [`GIVE_BACK_LIMIT`].
    ///
    /// # Errors
    /// The server's IO error, or an error saying the workers did not stop in time.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Application {
            server,
            operator,
            leaf,
            routes,
            _refresher,
            _sampler,
            leaser,
            sequencing,
            resp,
            ..
        } = self;
        let sides: Vec<Server> = operator.into_iter().chain(leaf).map(|s| s.server).collect();
        let handles: Vec<ServerHandle> = std::iter::once(server.handle())
            .chain(sides.iter().map(Server::handle))
            .collect();
        let in_flight = routes.observer.in_flight.clone();
        let (stopping, stop_requested) = tokio::sync::oneshot::channel::<()>();
        let stopper = AbortOnDrop(tokio::spawn(async move {
            shutdown.await;
            let _ = stopping.send(());
            tracing::info!(
                in_flight = in_flight.count(),
                "stopping: finishing in-flight requests"
            );
            // Stop accepting first, tell keep-alive clients to close, then wait for
            // the requests being served to be answered before the workers stop.
            join_all(handles.iter().map(ServerHandle::pause)).await;
            in_flight.close();
            in_flight.drained(DRAIN_TIMEOUT).await;
            join_all(handles.iter().map(|handle| handle.stop(true))).await;
        }));
        let served = async move {
            if sides.is_empty() {
                return server.await;
            }
            // A server runs while it is polled: all are, until all have stopped.
            let side_handles: Vec<ServerHandle> = sides.iter().map(Server::handle).collect();
            let public = async move {
                let result = server.await;
                // Stopped through the public handle, or failed: the other addresses
                // go with it.
                join_all(side_handles.iter().map(|handle| handle.stop(true))).await;
                result
            };
            let (public, sides) = join(public, join_all(sides)).await;
            sides.into_iter().fold(public, std::io::Result::and)
        };
        let workers_limit = DRAIN_TIMEOUT + WORKER_STOP_GRACE;
        let result = tokio::select! {
            result = served => result,
            () = async {
                // Stopped through the handle instead: no deadline.
                if stop_requested.await.is_err() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(workers_limit).await;
            } => {
                tracing::error!(limit = ?workers_limit, "the HTTP workers did not stop in time; leaving them");
                Err(std::io::Error::other(format!(
                    "the HTTP workers did not stop within {workers_limit:?}"
                )))
            }
        };
        drop(stopper);
        // Redis clients too are answered no more.
        drop(resp);
        // Nothing is served any more: free the worker ID for the next holder, and
        // give the caches' unissued IDs back where safe.
        drop(leaser);
        routes.state.snowflake.release().await;
        drop(sequencing);
        if tokio::time::timeout(RELEASE_LIMIT, routes.state.sequencer.release_all())
            .await
            .is_err()
        {
            tracing::warn!(limit = ?RELEASE_LIMIT, "the sequence sections were not all released in time; others take them once their leases run out");
        }
        let (given, wasted) = routes.state.cache.give_back().await;
        tracing::info!(given_back = given, wasted, "stopped");
        result
    }
}

/// The tasks that run beside the server's listeners.
struct Tasks {
    refresher: AbortOnDrop,
    sampler: AbortOnDrop,
    leaser: Option<AbortOnDrop>,
    sequencing: AbortOnDrop,
}

/// The service of a server listening on `port`, and its background tasks: the catalog
/// refresh, the rate sampling, the snowflake worker ID's lease (only where snowflake
/// IDs are enabled) and the sequence sections' rounds.
///
/// # Errors
/// [`StartupError`] when the store or the forwarding client cannot be built.
fn service(config: &Config, port: u16, mode: OpenMode) -> Result<(Service, Tasks), StartupError> {
    let store = Arc::new(Store::open(config, mode)?);
    // The first catalog read runs in the background (seconds over a million bizs):
    // requests are served meanwhile (see `Store::look_up`).
    let cache = Arc::new(Cache::new(
        store.clone(),
        config.preload_percent,
        config.wait_timeout,
    ));
    let names = Arc::new(Names::default());
    let refresher = AbortOnDrop(tokio::spawn(refresh_periodically(
        store.clone(),
        cache.clone(),
        names.clone(),
        config.catalog_refresh,
    )));
    let sampler = AbortOnDrop(tokio::spawn(sample_periodically(cache.clone())));
    let worker = Arc::new(Worker::new(store.clone(), config.snowflake.clone()));
    let leaser = config
        .snowflake
        .enabled
        .then(|| AbortOnDrop(tokio::spawn(worker.clone().run())));
    let sequencer = Arc::new(Sequencer::new(
        store.clone(),
        config.sequences.clone(),
        advertised(config, port),
    ));
    let sequencing = AbortOnDrop(tokio::spawn(sequencer.clone().run()));
    let forward = reqwest::Client::builder()
        .timeout(config.fetch_timeout)
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot build the forwarding client: {e}")))?;
    let service = Service {
        store,
        cache,
        snowflake: worker,
        names,
        sequencer,
        forward: Arc::new(HttpForward { client: forward }),
    };
    let tasks = Tasks {
        refresher,
        sampler,
        leaser,
        sequencing,
    };
    Ok((service, tasks))
}

/// The Redis-protocol listener of `resp.bind`, when it is set: its port and threads.
///
/// # Errors
/// [`StartupError::Bind`] when the address cannot be bound or the threads started.
fn resp_listener(
    config: &Config,
    service: &Arc<Service>,
) -> Result<Option<(u16, resp::Threads)>, StartupError> {
    let Some(address) = config.resp.bind.as_deref() else {
        return Ok(None);
    };
    let listener = bind("resp.bind", address)?;
    let port = local_port("resp.bind", address, &listener)?;
    let io = |source| StartupError::Bind {
        key: "resp.bind",
        bind: address.to_owned(),
        source,
    };
    listener.set_nonblocking(true).map_err(io)?;
    let shared = Arc::new(resp::Shared::new(
        service.clone(),
        config.resp.clone(),
        service.store.metrics().resp().clone(),
        port,
    ));
    let threads = match config.resp.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    Ok(Some((
        port,
        resp::start(listener, shared, threads).map_err(io)?,
    )))
}

/// Where other servers reach this one: `sequences.advertise`, else `http://` and the
/// address bound (`127.0.0.1` for an unspecified host) with the port listened on.
fn advertised(config: &Config, port: u16) -> String {
    if let Some(url) = &config.sequences.advertise {
        return url.clone();
    }
    let host = match config.bind.rsplit_once(':') {
        Some(("0.0.0.0" | "[::]" | "", _)) | None => "127.0.0.1",
        Some((host, _)) => host,
    };
    format!("http://{host}:{port}")
}

/// Binds `address`, the value of configuration key `key`.
fn bind(key: &'static str, address: &str) -> Result<TcpListener, StartupError> {
    TcpListener::bind(address).map_err(|source| StartupError::Bind {
        key,
        bind: address.to_owned(),
        source,
    })
}

/// The listener of `operator_bind`, when it is set.
fn operator_listener(config: &Config) -> Result<Option<TcpListener>, StartupError> {
    config
        .operator_bind
        .as_deref()
        .map(|address| bind("operator_bind", address))
        .transpose()
}

/// The port `listener` (bound for configuration key `key`) listens on.
fn local_port(
    key: &'static str,
    address: &str,
    listener: &TcpListener,
) -> Result<u16, StartupError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| StartupError::Bind {
            key,
            bind: address.to_owned(),
            source,
        })
}

/// Starts an HTTP server with the routes of `serves` on `listener`, with `workers`
/// workers (0: one per core).
fn serve(
    config: &Config,
    routes: &Routes,
    serves: Serves,
    workers: usize,
    listener: TcpListener,
) -> Result<Server, StartupError> {
    let key = match serves {
        Serves::Operator => "operator_bind",
        Serves::Leaf => "leaf.bind",
        Serves::Everything | Serves::Public => "bind",
    };
    let address = listener
        .local_addr()
        .map_or_else(|_| key.to_owned(), |a| a.to_string());
    let worker_routes = routes.clone();
    let mut server = HttpServer::new(move || {
        App::new().configure(|cfg| worker_routes.configure_for(cfg, serves))
    })
    // `run_until` drains the requests itself (up to DRAIN_TIMEOUT); what is left
    // for actix to wait for is idle keep-alive connections, which need no wait.
    .shutdown_timeout(1)
    .client_request_timeout(config.request_timeout)
    .keep_alive(if config.keep_alive.is_zero() {
        actix_web::http::KeepAlive::Disabled
    } else {
        actix_web::http::KeepAlive::Timeout(config.keep_alive)
    })
    // Answers go out as soon as they are written: with Nagle's algorithm a response
    // written while an earlier one is unacknowledged (pipelined requests, a large
    // batch) waits for the client's delayed ACK.
    .tcp_nodelay(true)
    // Signals are handled by `run_until`: both SIGTERM and SIGINT stop gracefully.
    .disable_signals();
    if workers > 0 {
        server = server.workers(workers);
    }
    Ok(server
        .listen(listener)
        .map_err(|source| StartupError::Bind {
            key,
            bind: address,
            source,
        })?
        .run())
}

/// Longest a graceful stop waits for in-flight requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest the HTTP workers may take to stop after the drain (actix closes idle
/// connections after one second): a worker still running then is stuck, and is left.
pub const WORKER_STOP_GRACE: Duration = Duration::from_secs(5);

/// Longest a stop waits for this server's sequence sections to be released; a section
/// not released is taken over once its lease runs out.
pub const RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// Longest a stop takes once it began: the drain, the workers' stop, the give-back,
/// and a few seconds for the rest. [`Application::run_until`] returns within it; the
/// binary exits when it passes even if something it does not control hangs.
pub const STOP_LIMIT: Duration = Duration::from_secs(
    DRAIN_TIMEOUT.as_secs()
        + WORKER_STOP_GRACE.as_secs()
        + RELEASE_LIMIT.as_secs()
        + GIVE_BACK_LIMIT.as_secs()
        + 5,
);

/// Completes on the first SIGTERM or SIGINT (Ctrl-C) received after this call. The
/// listeners are registered at once, not when the future is first polled: a signal sent
/// as soon as the server answers (before the stop task ran) must not be lost. Call it
/// within a Tokio runtime, before the server starts answering.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let listeners = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match listeners {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot listen for signals; stop with the server handle");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Reads the catalog a first time and sorts its names, then re-reads the catalog
/// every `every` and brings the names up to date, so that a listing rarely waits for
/// them (only after a refresh a request asked for: an unknown biz or token).
async fn refresh_periodically(
    store: Arc<Store>,
    cache: Arc<Cache>,
    names: Arc<Names>,
    every: Duration,
) {
    let catalog = store.first_refresh().await;
    names.of(catalog, || cache.names_in_use()).await;
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let catalog = store.refresh_since(store.now()).await;
        names.of(catalog, || cache.names_in_use()).await;
    }
}

/// Samples the issue counts once a second, for rates and peaks.
async fn sample_periodically(cache: Arc<Cache>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        cache.sample(Instant::now());
    }
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().json(serde_json::json!({
        "error": {"code": "not_found", "message": format!("no route for {} {}", req.method(), req.path())}
    }))
}
