//! A model of segmint's layout-change protocol (`segmint db add` / `db remove` /
//! `db remove NAME --lost`, servers reserving segments and leasing worker IDs while it
//! runs), checked by [stateright](https://docs.rs/stateright) over every interleaving
//! of its actors' steps at small sizes.
//!
//! The model carries out the steps of the store's own machines, one database statement
//! per step: `layout::Change` (a change from its claim to `done`), `layout::Move` (one
//! biz's move), `segment::reserve::Reserve` (a reservation; its read and
//! compare-and-set at once), `snowflake::lease::Take` and `Renew` (worker IDs). For
//! every decision it calls the project's own pure functions (`layout::merge`,
//! `required`, `plan`, `healing`, `frozen_by`, `read`, `current` …), so it checks the
//! code, not a copy of it. It keeps the world (databases, their faults, the servers'
//! views) and the properties. What it
//! checks in every reachable state:
//! - **no duplicate ID**: no ID is issued twice (a reservation issues every ID of its
//!   segment at once);
//! - **no worker ID held twice**: no two servers issue with one worker ID at once;
//! - **no live row left below the layout done** (without restores): a row that no
//!   server will serve from and no change will move.
//!
//! Faults: a command stops after any step (a crash, or a pause for good); a second
//! command finishes or supersedes a change once its command stopped (`Spec::paused`,
//! a command waking up after it fell silent, is modelled, but scenario C with it
//! outgrew 12 GB of memory); databases go down and
//! come back; a row is restored from a backup (and `db fence` run after it); commands
//! run at once, or with a configuration that names only some databases; an import
//! creating the biz while a change starts; leases run out; servers' clocks reach the
//! next period of a biz whose counter restarts each period at different moments (each
//! reservation then in its period's window, `Window::range`).
//!
//! Each scenario is checked twice or more: with every safeguard on ([`Fixes::ALL`]),
//! where the checker must find no counterexample (and must reach a finished change and
//! an ID issued in the new layout), and with the safeguard that stops a known bug
//! switched off, where it must find that bug. Each check prints the states it explored,
//! its time, and the trace of any counterexample.
//!
//! Sizes: the default run keeps each check to seconds (one biz, step 2, `max_id` 4 or
//! 6, one database outage). `TEST_DEEP=1` (set by `scripts/test --deep`) runs deeper: larger `max_id`, more
//! outages, more rounds per move and heals, and the bigger scenarios (three
//! databases, an odd-only biz), in several minutes. Alone:
//! `TEST_DEEP=1 cargo test -p segmint-model -- --nocapture`. The crate is compiled with
//! optimisation in test builds too (the workspace's profile), so no `--release` is
//! needed.
//!
//! Beside it, [`agreement`] is a small model of its own: servers of different snowflake
//! specs agreeing on one through the databases (scenarios K and L); and [`founding`]
//! another: two `segmint migrate`s of different configurations recording the
//! membership at once (scenario M); and [`sequence`] another: servers running the
//! holders of a sequence section and of presence slots, with time and clocks, and a
//! layout change carrying the section (scenario P).
//!
//! Layout: [`model`] holds the state, the actions and the properties; [`command`] a
//! layout-change command (its decision, then `Change`'s steps); [`mover`] carries out
//! one biz's `Move` (for commands and servers' heals); [`import`] an import creating
//! the biz; [`server`] a server's refreshes, reservations, heals and lease; [`trace`]
//! prints counterexamples; [`scenarios`] the checked scenarios and their tests.

// See crates/model/Cargo.toml: states are allocated and freed at every step.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod agreement;
mod command;
mod founding;
mod import;
mod model;
mod mover;
mod scenarios;
mod sequence;
mod server;
mod trace;

use std::collections::BTreeSet;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

use model::Sys;

/// Whether the deeper (slower) checks are asked for.
fn deep() -> bool {
    std::env::var("TEST_DEEP").is_ok_and(|v| v == "1")
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Prints what a check explored: states, unique states, depth and time since `started`.
fn counts<M: Model>(title: &str, checker: &impl Checker<M>, started: Instant) {
    eprintln!(
        "{title}: {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
}

/// Checks a small model (the agreement's, the membership record's) over every
/// reachable state, or until a counterexample to `property` when `expect_bug`;
/// prints the counts, and the path of a counterexample.
fn check_small<M>(title: &str, model: M, property: &'static str, expect_bug: bool)
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let started = Instant::now();
    let builder = model.checker().threads(threads());
    if expect_bug {
        // Depth first for a known bug, as [`finds`] says why.
        let checker = builder
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
            .spawn_dfs()
            .join();
        counts(title, &checker, started);
        match checker.discovery(property) {
            Some(path) => eprintln!("{title}: counterexample, as expected:\n{path:?}"),
            None => panic!("{title}: expected a counterexample to \"{property}\", found none"),
        }
        return;
    }
    let checker = builder.spawn_bfs().join();
    counts(title, &checker, started);
    if let Some(path) = checker.discovery(property) {
        panic!("{title}: counterexample to \"{property}\":\n{path:?}");
    }
    checker.assert_properties();
}

/// Checks every reachable state of `sys`: no property may fail, and every `sometimes`
/// property must be reached.
fn holds(sys: Sys) {
    let title = sys.spec.title;
    let started = Instant::now();
    let checker = sys.checker().threads(threads()).spawn_bfs().join();
    counts(title, &checker, started);
    for name in [
        "no duplicate ID",
        "no worker ID held twice",
        "no live row left below the layout done",
    ] {
        if let Some(path) = checker.discovery(name) {
            panic!(
                "{title}: counterexample to \"{name}\":\n{}",
                checker.model().trace(path)
            );
        }
    }
    checker.assert_properties();
}

/// Checks `sys` until a counterexample to `property` is found, and prints it; fails
/// when every reachable state was explored without one.
///
/// Depth first: a known bug lies deep (a restore after a change, a claim in flight
/// past a lease), and a breadth-first search explores every shorter interleaving
/// before it. Measured on 2026-12-07 (`cargo nextest run -p segmint-model -E
/// 'test(/caught|twice|goes_back/)'`, 2 cores, 31 tests: every known bug and a few
/// checks that hold): 38 s instead of 76 s; the fence that raises rows live is found
/// in 3.0 s instead of 16.3 s. The trace printed is a path to the bug, not the
/// shortest one.
fn finds(sys: Sys, property: &'static str) {
    let builder = sys
        .checker()
        .threads(threads())
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])));
    let started = Instant::now();
    let checker = builder.spawn_dfs().join();
    let title = checker.model().spec.title;
    counts(title, &checker, started);
    let path = checker.discovery(property).unwrap_or_else(|| {
        panic!("{title}: expected a counterexample to \"{property}\", found none")
    });
    eprintln!(
        "{title}: counterexample to \"{property}\":\n{}",
        checker.model().trace(path)
    );
}
