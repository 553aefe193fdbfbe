//! Servers whose operator routes have their own address, and the operator token.

use std::net::TcpListener;

use segmint::config::Config;
use segmint::server::Application;

use super::http::Remote;
use super::{TestApp, run_app};

/// The routes that show what the server sees: behind `operator_token`, on
/// `operator_bind`.
pub const OPERATOR_ROUTES: [&str; 4] = ["/metrics", "/status", "/v1/bizs", "/readyz"];

/// An operator token long enough to be accepted.
pub const OPERATOR_TOKEN: &str = "operator-token-for-tests-0123456789";

/// A server in this process with its operator routes on a port of their own: the
/// app of its `bind` address, and the same server seen at its operator address.
pub async fn spawn_app_with_operator(config: Config) -> (TestApp, Remote) {
    let bind = || TcpListener::bind("127.0.0.1:0").unwrap();
    let app = Application::with_listeners(config, bind(), bind())
        .await
        .expect("build app");
    let app = super::app::read(app).await;
    let port = app.operator_port().expect("an operator address");
    let public = run_app(app);
    let operator = Remote {
        base: format!("http://127.0.0.1:{port}"),
        ..public.remote()
    };
    (public, operator)
}
