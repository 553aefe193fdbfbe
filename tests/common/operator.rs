//! Servers whose operator routes have their own address, and requests carrying an
//! operator token.

use std::net::TcpListener;

use segmint::config::Config;
use segmint::server::Application;

use super::{TestApp, run_app};

/// The routes that show what the server sees: behind `operator_token`, on
/// `operator_bind`.
pub const OPERATOR_ROUTES: [&str; 4] = ["/metrics", "/status", "/v1/bizs", "/readyz"];

/// An operator token long enough to be accepted.
pub const OPERATOR_TOKEN: &str = "operator-token-for-tests-0123456789";

/// A server in this process with its operator routes on a port of their own: the
/// app of its `bind` address, and the same server seen at its operator address.
pub async fn spawn_app_with_operator(config: Config) -> (TestApp, TestApp) {
    let bind = || TcpListener::bind("127.0.0.1:0").unwrap();
    let app = Application::with_listeners(config, bind(), bind())
        .await
        .expect("build app");
    let port = app.operator_port().expect("an operator address");
    let public = run_app(app);
    let operator = TestApp {
        base: format!("http://127.0.0.1:{port}"),
        http: public.http.clone(),
        state: public.state.clone(),
        handle: public.handle.clone(),
    };
    (public, operator)
}

/// What a GET answered: the status, its `WWW-Authenticate` header and the body.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The `WWW-Authenticate` header, if any.
    pub challenge: Option<String>,
    /// The body.
    pub body: String,
}

impl TestApp {
    /// GET `path` with `authorization` as the `Authorization` header, if any.
    pub async fn get_authorized(&self, path: &str, authorization: Option<&str>) -> Answer {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(value) = authorization {
            req = req.header("authorization", value);
        }
        let r = req.send().await.unwrap();
        Answer {
            status: r.status().as_u16(),
            challenge: r
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned()),
            body: r.text().await.unwrap(),
        }
    }
}
