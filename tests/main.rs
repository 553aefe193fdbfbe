//! segmint's integration tests, one module per concern, built as one test binary: one
//! link of segmint and its dependencies instead of one per file (measured: a rebuild
//! after a library edit 3–8× faster, 0.4 GB of test binaries instead of 5 GB). nextest
//! still runs every test in its own process. The chaos run (`tests/chaos/`) stays a
//! binary of its own, built in release by `scripts/chaos`.

mod common;

mod all_down;
mod bad_input;
mod catalog_down;
mod cli;
mod client;
mod client_segments;
mod client_sizing;
mod compat;
mod contract;
mod dockerfile;
mod docs;
mod embedded;
mod failover;
mod faults_embedded;
mod faults_kill;
mod faults_lock;
mod faults_time;
mod feed;
mod fuzz;
mod giveback;
mod giveback_dead_db;
mod hardening;
mod import;
mod layout;
mod layout_operator;
mod leaf;
mod many_bizs;
mod maria_harness;
mod membership;
mod mysql;
mod mysql_ops;
mod mysql_tls;
mod observability;
mod operator;
mod periods;
mod preload;
mod quickstart;
mod redis_failover;
mod resp;
mod resp_clients;
mod sequence_layout;
mod sequence_servers;
mod sequences;
mod shapes;
mod smoke;
mod snowflake;
mod step;
mod tidy;
mod timing;
mod tls;
mod tokens;
mod uniqueness;
