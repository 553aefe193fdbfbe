//! Test harness, one file per concern: throwaway PostgreSQL clusters ([`pg`]),
//! segmint servers in this process ([`app`]) and as real processes ([`process`]),
//! waiting for a condition ([`wait`]), an in-memory store ([`memory`]), and fixtures
//! of single suites (TLS, operator routes, tokens). What most tests name is
//! re-exported here: `common::PgCluster`, `common::spawn_app`, …
#![allow(dead_code)]

pub mod app;
pub mod memory;
pub mod operator;
pub mod pg;
pub mod process;
pub mod tls;
pub mod wait;

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use app::{TestApp, add_token, run_app, setup_biz, shared, spawn_app};
#[allow(unused_imports)]
pub use pg::{
    Databases, Kind, PgCluster, check, cluster_dir, config, config_toml, config_toml_urls,
    free_port, pg_bin, pg_command, run_as,
};
#[allow(unused_imports)]
pub use process::{
    ChildGuard, ServerProcess, child_healthy, segmint_bin, send_signal, serve_command, wait_healthy,
};
#[allow(unused_imports)]
pub use wait::eventually;

pub mod by_kind;
pub mod cli;
pub mod http;
pub mod stop;
pub mod tokens;
