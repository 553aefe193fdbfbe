//! Test harness, one file per concern: throwaway PostgreSQL clusters ([`pg`]),
//! segmint servers in this process ([`app`]) and as real processes ([`process`],
//! stopped by [`stop`]), requests to either ([`http`]), admin commands ([`cli`]),
//! waiting for a condition ([`wait`]), an in-memory store ([`memory`]), clusters for
//! layout changes ([`layout`]), steady traffic on servers ([`traffic`]), and fixtures
//! of single suites (TLS, operator routes, tokens, tests run on both stores). What
//! most tests name is re-exported here: `common::PgCluster`, `common::spawn_app`, …
#![allow(dead_code)]

pub mod app;
pub mod by_kind;
pub mod cli;
pub mod clock;
pub mod http;
pub mod ids;
pub mod layout;
pub mod maria;
pub mod memory;
pub mod node;
pub mod operator;
pub mod pg;
pub mod process;
pub mod python;
pub mod resp;
pub mod sequences;
pub mod stop;
pub mod tls;
pub mod tokens;
pub mod traffic;
pub mod wait;

// The chaos run's binary includes this harness too and uses only part of it.
#[allow(unused_imports)]
pub use app::{
    TestApp, add_token, read, run_app, setup_biz, setup_daily_tick, setup_sequence, shared,
    spawn_app, spawn_app_at_once,
};
#[allow(unused_imports)]
pub use ids::assert_unique;
#[allow(unused_imports)]
pub use maria::MariaServer;
#[allow(unused_imports)]
pub use pg::{
    Databases, Kind, PgCluster, check, cluster_dir, config, config_toml, config_toml_named,
    config_toml_urls, free_port, hold, pg_bin, pg_command, raw_store, row_sql, run_as,
};
#[allow(unused_imports)]
pub use process::{
    ChildGuard, ServerProcess, child_healthy, segmint_bin, send_signal, serve_command,
    stop_process, wait_healthy,
};
#[allow(unused_imports)]
pub use wait::{eventually, eventually_every, readyz_database, until_fenced};

/// Whether the long checks are asked for: `scripts/test --deep` sets `TEST_DEEP=1`.
pub fn deep() -> bool {
    std::env::var("TEST_DEEP").is_ok_and(|v| v == "1")
}
