//! segmint in this process: databases set up through the store, and a server on a
//! random port with a request method per route a test asks.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use super::http;

use segmint::biz::BizTag;
use segmint::config::Config;
use segmint::segment::Residue;
use segmint::server::Application;
use segmint::store::Store;

/// Migrates every database and adds `biz` with `step` (odd-only when `odd`), plus a
/// token for it. Returns the token.
pub async fn setup_biz(config: &Config, biz: &str, step: i64, odd: bool) -> String {
    let store = Store::connect(config).unwrap();
    for (db, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    let within = odd.then(|| Residue::new(2, 1).unwrap());
    let biz = BizTag::parse(biz).unwrap();
    store
        .cluster()
        .add_biz(&biz, step, 1, within)
        .await
        .unwrap();
    store.add_token(&biz, "test").await.unwrap().0
}

/// Biz `tick`, whose two-digit counter restarts each day in a zone where it is now
/// about noon; its token.
pub async fn setup_daily_tick(config: &segmint::config::Config) -> String {
    let store = segmint::store::Store::connect(config).unwrap();
    let (zone, _) = super::clock::noon_zone();
    let shape = segmint::store::ShapeRow::periodic(
        format!("daily;{zone};1;T{{yyyy}}{{MM}}{{dd}}{{seq:02}}"),
        2,
        10,
        false,
    );
    let biz = segmint::biz::BizTag::parse("tick").unwrap();
    store
        .cluster()
        .add_shaped_biz(&biz, 10, 1, None, "", Some(shape))
        .await
        .unwrap();
    store.add_token(&biz, "test").await.unwrap().0
}

/// Adds the sequence biz `seq` (8 sections, step 100); returns a token for it.
pub async fn setup_sequence(config: &segmint::config::Config) -> String {
    let store = segmint::store::Store::connect(config).unwrap();
    let biz = segmint::biz::BizTag::parse("seq").unwrap();
    let shape = segmint::store::ShapeRow::sequence(8);
    store
        .cluster()
        .add_shaped_biz(&biz, 100, 1, None, "", Some(shape))
        .await
        .unwrap();
    store.add_token(&biz, "test").await.unwrap().0
}

/// Adds a token for `biz` (which must exist).
pub async fn add_token(config: &Config, biz: &str) -> String {
    let store = Store::connect(config).unwrap();
    store
        .add_token(&BizTag::parse(biz).unwrap(), "test")
        .await
        .unwrap()
        .0
}

/// A segmint server running in this process on a random port.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`, which request paths are appended to.
    pub base: String,
    /// One client for every request, with a timeout so that a hung server fails the test.
    pub http: reqwest::Client,
    /// The server's state, for what a test checks without a request.
    pub state: actix_web::web::Data<segmint::server::AppState>,
    /// Stops the server; shared with the operator address's view of the same server.
    pub(super) handle: actix_web::dev::ServerHandle,
}

/// A server in this process, once its first catalog read is over (or failed): what
/// most tests check is a server in its steady state.
pub async fn spawn_app(config: Config) -> TestApp {
    let app = spawn_app_at_once(config).await;
    app.state.store.read_catalog().await;
    app
}

/// A server in this process as soon as it listens: its first catalog read may still
/// run (a server serves meanwhile, see `Store::look_up`).
pub async fn spawn_app_at_once(config: Config) -> TestApp {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let app = Application::with_listener(config, listener)
        .await
        .expect("build app");
    run_app(app)
}

/// `app` once its first catalog read is over (or failed).
pub async fn read(app: Application) -> Application {
    app.state().store.read_catalog().await;
    app
}

/// Runs `app` in this process; the handle serves its `bind` address.
pub fn run_app(app: Application) -> TestApp {
    let base = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    let state = app.state();
    tokio::spawn(app.run_until(std::future::pending()));
    TestApp {
        base,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        state,
        handle,
    }
}

impl TestApp {
    /// GET `path` (with query): status and body text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = http::get(self, path).await;
        (r.status, r.body)
    }

    /// GET `path` with a bearer token: status and the body as JSON (`null` when it is
    /// not JSON).
    pub async fn get_v1(&self, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
        let r = http::v1(self, false, path, token.and_then(http::bearer)).await;
        (r.status, serde_json::from_str(&r.body).unwrap_or_default())
    }

    /// `n` IDs through the v1 API; panics on any failure.
    pub async fn ids(&self, biz: &str, token: &str, n: usize) -> Vec<i64> {
        http::v1_ids(self, biz, token, n).await
    }

    pub async fn stop(&self) {
        self.handle.stop(true).await;
    }
}

/// Shares one value between tasks.
pub fn shared<T>(v: T) -> Arc<T> {
    Arc::new(v)
}
