//! The checks of a finished run and its report.

use super::*;

pub(crate) fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub(crate) fn ms(us: u32) -> String {
    format!("{:.1}", f64::from(us) / 1000.0)
}

pub(crate) fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Sums `key=N` over the lines of a log.
pub(crate) fn sum_field(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(key))
        .filter_map(|(_, rest)| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// One verdict of the audit.
pub(crate) struct Check {
    pub(crate) what: String,
    pub(crate) ok: bool,
    pub(crate) detail: String,
}

pub(crate) fn check(
    what: impl Into<String>,
    problems: &[String],
    fine: impl Into<String>,
) -> Check {
    Check {
        what: what.into(),
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            fine.into()
        } else {
            problems.join("; ")
        },
    }
}

/// Figures of the audit shown besides the checks.
pub(crate) struct Findings {
    /// `(biz, IDs received, distinct, duplicates)`.
    pub(crate) per_biz: Vec<(Biz, u64, u64, u64)>,
    /// Per client: `(segments installed, their IDs, IDs returned)`.
    pub(crate) clients: Vec<(usize, u64, u64)>,
    pub(crate) spans: usize,
    pub(crate) given_back: u64,
    pub(crate) wasted: u64,
}

/// Checks everything received: no duplicate, every ID in its database's class and
/// below that database's `max_id`, the clients' IDs within their segments; and that the
/// service kept serving and the faults were all there.
pub(crate) fn audit_run(ctx: &Ctx, run: &mut Run) -> (Vec<Check>, Findings) {
    let mut checks = Vec::new();
    let mut received = Ledger::new();
    let mut client_ids: Vec<Ledger> = CLIENT_GROUPS.iter().map(|_| Ledger::new()).collect();
    let mut spans = 0;
    for o in run.outcomes.iter_mut() {
        let ledger = std::mem::replace(&mut o.ledger, Ledger::new());
        spans += ledger.span_count();
        match o.group {
            None => received.absorb(ledger),
            Some(g) => client_ids[g].absorb(ledger),
        }
    }

    // A client's segments count as received; what it returned must lie within them.
    let mut clients = Vec::new();
    for (g, handle) in run.clients.iter().enumerate() {
        let (biz, _) = CLIENT_GROUPS[g];
        let source = run.sources.len() as u32;
        run.sources
            .push(format!("client {g} (`{}`) segments", biz.name()));
        let mut segs = Ledger::new();
        let installed = handle.segments();
        let mut problems = Vec::new();
        for range in &installed {
            let seg = Seg {
                current: range.current_id(),
                max: range.max_id(),
                delta: range.residue().delta(),
                remainder: range.residue().remainder(),
            };
            if let Err(e) = check_segment(biz, &seg, None, STEP..=STEP_MAX)
                && problems.len() < 5
            {
                problems.push(format!("{seg:?}: {e}"));
            }
            segs.add_segment(biz, &seg, source);
        }
        let mut ids = std::mem::replace(&mut client_ids[g], Ledger::new());
        let returned = ids.total(biz);
        let twice = audit(&mut ids, biz, &run.sources);
        problems.extend(twice.examples);
        problems.extend(outside(&mut ids, &mut segs, biz));
        checks.push(check(
            format!("client {g}: every ID it returned is unique and in a segment it installed"),
            &problems,
            format!("{returned} IDs returned from {} segments", installed.len()),
        ));
        clients.push((installed.len(), segs.total(biz), returned));
        received.absorb(segs);
    }

    let mut per_biz = Vec::new();
    let mut duplicates = Vec::new();
    let mut out_of_class = Vec::new();
    for biz in BIZS {
        let total = received.total(biz);
        let a = audit(&mut received, biz, &run.sources);
        duplicates.extend(a.examples);
        let m = biz.modulus();
        for (class, spans) in received.spans[biz.index()].iter().enumerate() {
            let Some(lo) = spans.iter().map(|s| s.lo).min() else {
                continue;
            };
            let hi = spans.iter().map(|s| s.hi).max().unwrap();
            let (min_id, max_id) = (class as i64 + m * lo, class as i64 + m * hi);
            match biz.database_of(class as i64) {
                None => out_of_class.push(format!(
                    "biz `{}`: IDs {min_id}..={max_id} are {class} mod {m}, a class no database issues",
                    biz.name()
                )),
                Some(db) => {
                    let row = ctx.databases[db].engine.row(biz.name());
                    let row_max: i64 = row.split('|').next().unwrap().parse().unwrap();
                    if max_id > row_max || min_id < 1 {
                        out_of_class.push(format!(
                            "biz `{}`: IDs of class {class} mod {m} reach {min_id}..={max_id}, beyond {}'s row ({row})",
                            biz.name(),
                            db_name(db)
                        ));
                    }
                }
            }
        }
        per_biz.push((biz, total, a.distinct, a.duplicates));
    }
    let dup_count: u64 = per_biz.iter().map(|p| p.3).sum();
    if dup_count > 0 {
        duplicates.insert(0, format!("{dup_count} duplicate(s)"));
    }
    checks.insert(
        0,
        check(
            "no ID received twice (every API, every segment, every client segment)",
            &duplicates,
            format!("{} distinct IDs", per_biz.iter().map(|p| p.2).sum::<u64>()),
        ),
    );
    checks.push(check(
        "every ID in its database's class and below that database's max_id (`odd`: all odd)",
        &out_of_class,
        "classes 0, 1, 2 mod 3 (`chaos`) and 1, 3, 5 mod 6 (`odd`)",
    ));

    let stats = || run.outcomes.iter().map(|o| &o.stats);
    let unexpected: Vec<String> = stats().flat_map(|s| s.unexpected.clone()).collect();
    checks.push(check(
        "every failure is an outage (connection, timeout, 503, unavailable); every answer well-formed",
        &unexpected,
        "yes",
    ));
    let not_back: Vec<String> = stats()
        .filter(|s| s.ok_when_calm == 0)
        .map(|s| format!("{} did not", s.name))
        .collect();
    checks.push(check(
        format!(
            "every worker served again within {} s of the last repair",
            CALM_MAX.as_secs()
        ),
        &not_back,
        format!("yes, all within {:.1} s", run.calm_secs),
    ));
    let (longest, worker, from, to) = longest_unavailable(run);
    let stuck = if longest >= MAX_UNAVAILABLE.as_secs_f64() {
        vec![format!(
            "{worker}: {longest:.1} s from t = {from:.1} s to {to:.1} s"
        )]
    } else {
        Vec::new()
    };
    checks.push(check(
        format!(
            "no worker without a success for {} s or more (not counting stalls of the test process)",
            MAX_UNAVAILABLE.as_secs()
        ),
        &stuck,
        format!("longest: {longest:.2} s ({worker})"),
    ));

    let (mut given_back, mut wasted) = (0, 0);
    for server in &ctx.servers {
        let text = std::fs::read_to_string(&server.log).unwrap_or_default();
        if let Some(i) = text.find("panicked") {
            let end = (i + 400..text.len())
                .find(|&e| text.is_char_boundary(e))
                .unwrap_or(text.len());
            ctx.anomaly(format!(
                "server {} panicked: {}",
                server.index,
                &text[i..end]
            ));
        }
        given_back += sum_field(&text, "given_back=");
        wasted += sum_field(&text, "wasted=");
    }
    let anomalies = ctx.anomalies.lock().unwrap().clone();
    checks.push(check(
        "no server crashed or panicked; every restart came back; every fault's own checks passed",
        &anomalies,
        "yes",
    ));
    checks.extend(layout_checks(&ctx.layout_log.lock().unwrap()));
    if run.secs >= 60 {
        let restarts = restarts(&run.faults);
        let mut missing: Vec<String> = FAULT_KINDS
            .iter()
            .filter(|&&k| count(&run.faults, k) == 0)
            .map(|k| format!("no {k:?}"))
            .collect();
        missing.extend(
            (0..SERVERS)
                .filter(|&s| restarts[s] == 0)
                .map(|s| format!("server {s} never restarted")),
        );
        missing.extend(
            [
                FaultKind::DbKill,
                FaultKind::BackInTime,
                FaultKind::DiskFull,
            ]
            .into_iter()
            .filter(|&k| {
                !run.faults
                    .iter()
                    .any(|f| f.kind == k && f.target == MARIA_DB)
            })
            .map(|k| format!("no {k:?} on {}", db_name(MARIA_DB))),
        );
        checks.push(check(
            "every kind of fault injected (MariaDB killed, restored and filled); every server restarted",
            &missing,
            format!(
                "{} faults; restarts per server: {restarts:?}",
                run.faults.len()
            ),
        ));
    }
    (
        checks,
        Findings {
            per_biz,
            clients,
            spans,
            given_back,
            wasted,
        },
    )
}

/// The layout faults' verdicts: a command missing a database from its configuration
/// is refused, naming it (unless no layout was stored yet: see [`MissingRun::first`];
/// a database it adds that does not answer is checked after the missing one),
/// and changes nothing (exiting 0 is the bug of a change made without a database that
/// may hold live rows); of two commands started together at most one wins, unless the
/// second ran from the layout the first made.
pub(crate) fn layout_checks(log: &LayoutLog) -> Vec<Check> {
    let mut wrong = Vec::new();
    for m in &log.missing {
        let what = format!(
            "t={:.1}s `{}` without {}",
            m.at,
            m.command,
            db_name(m.missing)
        );
        if !m.refused() {
            wrong.push(format!(
                "{what} was not refused ({}): \"{}\"",
                m.code.map_or("killed".into(), |c| format!("exit {c}")),
                short(&m.message, 200)
            ));
        } else if !m.named && !m.first {
            wrong.push(format!(
                "{what} was refused without naming {}: \"{}\"",
                db_name(m.missing),
                short(&m.message, 200)
            ));
        }
        if let Err(e) = &m.unchanged {
            wrong.push(format!("layout or biz rows changed: {e}"));
        }
    }
    wrong.dedup();
    let refused = log.missing.iter().filter(|m| m.refused()).count();
    let races: Vec<String> = log.races.iter().filter_map(RaceRun::violation).collect();
    let count = |f: &dyn Fn(&RaceRun) -> bool| log.races.iter().filter(|r| f(r)).count();
    vec![
        check(
            "every layout command missing a database from its configuration was refused, naming it, and changed nothing",
            &wrong,
            if log.missing.is_empty() {
                "none run".to_string()
            } else {
                format!("{refused} of {} refused, none exited 0", log.missing.len())
            },
        ),
        check(
            "of two layout commands started together, at most one won its epoch (both only one after the other)",
            &races,
            if log.races.is_empty() {
                "none run".to_string()
            } else {
                format!(
                    "{} races: one won, the other refused {}; one won, the other a no-op {}; one after the other {}; neither won {}",
                    log.races.len(),
                    count(&|r| r.winners() == 1 && r.exits_0() == 1),
                    count(&|r| r.winners() == 1 && r.exits_0() == 2),
                    count(&|r| r.winners() == 2),
                    count(&|r| r.winners() == 0),
                )
            },
        ),
    ]
}

/// The layout faults' commands: what each did.
fn layout_section(w: &mut String, log: &LayoutLog) {
    use std::fmt::Write as _;
    let _ = writeln!(w, "\n## Layout commands\n");
    let refused = log.missing.iter().filter(|m| m.refused()).count();
    let _ = writeln!(
        w,
        "With a database missing from the configuration: {} commands; refused {refused}, naming the missing database {} (before any layout was stored, without naming it: {}); exited 0 (the change made without it) {}.\n",
        log.missing.len(),
        log.missing
            .iter()
            .filter(|m| m.refused() && m.named)
            .count(),
        log.missing
            .iter()
            .filter(|m| m.refused() && !m.named && m.first)
            .count(),
        log.missing.iter().filter(|m| m.code == Some(0)).count(),
    );
    for m in &log.missing {
        let _ = writeln!(
            w,
            "- t = {:.1} s, `{}` without {}: {} \"{}\"",
            m.at,
            m.command,
            db_name(m.missing),
            m.code.map_or("killed".into(), |c| format!("exit {c},")),
            short(&m.message, 200)
        );
    }
    let _ = writeln!(
        w,
        "\nStarted together: {} pair(s); per pair, commands that exited 0: {:?}, of them winning an epoch: {:?} (a no-op exits 0 too).\n",
        log.races.len(),
        log.races.iter().map(RaceRun::exits_0).collect::<Vec<_>>(),
        log.races.iter().map(RaceRun::winners).collect::<Vec<_>>()
    );
    for r in &log.races {
        let _ = writeln!(
            w,
            "- t = {:.1} s: `{}` {}; `{}` {}",
            r.at,
            r.commands[0],
            r.ended[0].describe(),
            r.commands[1],
            r.ended[1].describe()
        );
    }
    let _ = writeln!(
        w,
        "\nKilled midway (SIGKILL): {}; ended before the kill {}; left a change under way {}; then run again: the same command {}, the opposite {}, nothing to run {}; waited for the killed command's silence {}.\n",
        log.kills.len(),
        log.kills.iter().filter(|k| k.ended_first).count(),
        log.kills.iter().filter(|k| k.cut_off).count(),
        log.kills
            .iter()
            .filter(|k| matches!(k.rerun, Some((_, true))))
            .count(),
        log.kills
            .iter()
            .filter(|k| matches!(k.rerun, Some((_, false))))
            .count(),
        log.kills.iter().filter(|k| k.rerun.is_none()).count(),
        log.kills.iter().filter(|k| k.waited).count(),
    );
    for k in &log.kills {
        let _ = writeln!(
            w,
            "- t = {:.1} s: `{}` killed {}{}{}; then {}",
            k.at,
            k.command,
            k.point,
            if k.ended_first {
                " (it had ended first)"
            } else {
                ""
            },
            if k.cut_off {
                ", a change left under way"
            } else {
                ""
            },
            k.rerun
                .as_ref()
                .map_or("nothing to run".to_string(), |(c, _)| format!("`{c}`"))
        );
    }
}

/// The longest time one worker went without a success, less the time the test process
/// itself stood still meanwhile: `(seconds, worker, from, to)`.
pub(crate) fn longest_unavailable(run: &Run) -> (f64, &'static str, f64, f64) {
    let stalled: Vec<(f64, f64)> = run
        .stalls
        .iter()
        .map(|&(at, late)| (at + 0.1, at + 0.1 + late.as_secs_f64()))
        .collect();
    let mut longest = (0.0, "", 0.0, 0.0);
    for s in run.outcomes.iter().map(|o| &o.stats) {
        // Gaps under a second are not listed; the longest one stands for them.
        let gaps = if s.gaps.is_empty() {
            vec![s.gap_at]
        } else {
            s.gaps.clone()
        };
        for (from, to) in gaps {
            let still: f64 = stalled
                .iter()
                .map(|&(a, b)| (b.min(to) - a.max(from)).max(0.0))
                .sum();
            if to - from - still > longest.0 {
                longest = (to - from - still, s.name, from, to);
            }
        }
    }
    longest
}

pub(crate) fn count(faults: &[FaultRecord], kind: FaultKind) -> usize {
    faults.iter().filter(|f| f.kind == kind).count()
}

/// Restarts of each server (kill -9 or SIGTERM, then started again).
pub(crate) fn restarts(faults: &[FaultRecord]) -> Vec<usize> {
    (0..SERVERS)
        .map(|s| {
            faults
                .iter()
                .filter(|f| {
                    f.target == s && matches!(f.kind, FaultKind::ServerKill | FaultKind::ServerTerm)
                })
                .count()
        })
        .collect()
}

/// The report, in Markdown.
pub(crate) fn report(ctx: &Ctx, run: &mut Run, checks: &[Check], found: &Findings) -> String {
    use std::fmt::Write as _;
    let mut r = String::new();
    let w = &mut r;
    let passed = checks.iter().all(|c| c.ok);
    let (secs, seed) = (run.secs, run.seed);
    let _ = writeln!(w, "# segmint chaos run\n");
    let _ = writeln!(
        w,
        "**{}** — {secs} s of faults, seed `{seed}` (`CHAOS_SEED={seed} scripts/chaos {secs}` draws the same faults again), {}.\n",
        if passed { "PASSED" } else { "FAILED" },
        utc_now()
    );
    let _ = writeln!(
        w,
        "- Machine: {}, {} cores; {} build of segmint {}.",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        w,
        "- Setup: {DATABASES} databases (classes 0, 1, 2 mod 3): PostgreSQL clusters {} and {}, MariaDB {}, the last two each on a {TMPFS_MB} MB tmpfs; {SERVERS} `segmint serve` processes using all three \
         (fetch timeout 1 s, wait timeout 3 s, back-off 0.1–0.4 s, adaptive step off, clients' asks capped at step {STEP_MAX}); bizs `chaos` (step {STEP}: \
         segments of 100 IDs) and `odd` (`--odd`, step {STEP}: 50 IDs, classes 1, 3, 5 mod 6); {} workers, 2 s request timeout.",
        db_name(0),
        db_name(DISK_DB),
        db_name(MARIA_DB),
        run.outcomes.len()
    );
    let _ = writeln!(
        w,
        "- Timing: setup {:.1} s, faults {:.1} s, calm {:.1} s; traffic {:.1} s in all. Spans kept for the audit: {}.\n",
        run.setup_secs, run.chaos_secs, run.calm_secs, run.run_secs, found.spans
    );
    let _ = writeln!(w, "## Checks\n");
    for c in checks {
        let _ = writeln!(
            w,
            "- {} {}: {}",
            if c.ok { "✅" } else { "❌" },
            c.what,
            c.detail
        );
    }
    let _ = writeln!(w, "\n## Totals\n");
    let _ = writeln!(w, "| | value |\n| --- | --- |");
    for (biz, total, distinct, dup) in &found.per_biz {
        let _ = writeln!(
            w,
            "| IDs of `{}` received (distinct / duplicates) | {total} ({distinct} / {dup}) |",
            biz.name()
        );
    }
    let requests: u64 = run.outcomes.iter().map(|o| o.stats.requests).sum();
    let ok: u64 = run.outcomes.iter().map(|o| o.stats.ok).sum();
    let _ = writeln!(w, "| requests (HTTP requests, client calls) | {requests} |");
    let _ = writeln!(
        w,
        "| successes | {ok} ({:.3} %) |",
        100.0 * ok as f64 / requests.max(1) as f64
    );
    let longest = run
        .outcomes
        .iter()
        .map(|o| &o.stats)
        .max_by_key(|s| s.longest_gap)
        .unwrap();
    let _ = writeln!(
        w,
        "| longest unavailability (longest time between two successes of one worker) | {:.2} s ({}, t = {:.1}–{:.1} s) |",
        longest.longest_gap.as_secs_f64(),
        longest.name,
        longest.gap_at.0,
        longest.gap_at.1
    );
    let (unavailable, worker, from, to) = longest_unavailable(run);
    let _ = writeln!(
        w,
        "| the same, less the test process's own stalls | {unavailable:.2} s ({worker}, t = {from:.1}–{to:.1} s) |"
    );
    let longest_stall = run.stalls.iter().max_by_key(|s| s.1);
    let _ = writeln!(
        w,
        "| stalls of the test process itself (a 0.1 s timer 0.5 s or more late) | {}{} |",
        run.stalls.len(),
        longest_stall.map_or(String::new(), |(at, late)| format!(
            ", longest {:.2} s at t = {at:.1} s",
            late.as_secs_f64()
        ))
    );
    for (g, (n, ids, returned)) in found.clients.iter().enumerate() {
        let _ = writeln!(
            w,
            "| client {g} (`{}`): segments installed, their IDs, IDs returned | {n}, {ids}, {returned} |",
            CLIENT_GROUPS[g].0.name()
        );
    }
    let _ = writeln!(
        w,
        "| IDs given back / wasted by graceful stops | {} / {} |",
        found.given_back, found.wasted
    );

    let _ = writeln!(w, "\n## Workers\n");
    let _ = writeln!(
        w,
        "| worker | API | requests | successes | IDs | longest gap | p50 ms | p99 ms | max ms |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for o in run.outcomes.iter_mut() {
        let s = &mut o.stats;
        s.latencies_us.sort_unstable();
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} ({:.2} %) | {} | {:.2} s at {:.1} s | {} | {} | {} |",
            s.name,
            s.api,
            s.requests,
            s.ok,
            100.0 * s.ok as f64 / s.requests.max(1) as f64,
            s.ids,
            s.longest_gap.as_secs_f64(),
            s.gap_at.1,
            ms(percentile(&s.latencies_us, 0.5)),
            ms(percentile(&s.latencies_us, 0.99)),
            ms(s.latencies_us.last().copied().unwrap_or(0)),
        );
    }

    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    for o in &run.outcomes {
        for (k, n) in &o.stats.failures {
            *failures.entry(k.clone()).or_default() += n;
        }
    }
    let _ = writeln!(w, "\n## Failures seen by the workers\n");
    let _ = writeln!(w, "| failure | count |\n| --- | ---: |");
    for (k, n) in &failures {
        let _ = writeln!(w, "| {k} | {n} |");
    }
    if failures.is_empty() {
        let _ = writeln!(w, "| none | 0 |");
    }

    let faults = &run.faults;
    let _ = writeln!(w, "\n## Faults injected\n");
    let _ = writeln!(w, "| fault | count | held (total) |\n| --- | ---: | ---: |");
    for kind in FAULT_KINDS {
        let held = faults
            .iter()
            .filter(|f| f.kind == kind)
            .fold(0.0, |sum, f| sum + (f.end - f.start));
        let _ = writeln!(
            w,
            "| {} | {} | {held:.1} s |",
            kind.label(),
            count(faults, kind)
        );
    }
    let starts: Vec<u32> = ctx
        .starts
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .collect();
    let _ = writeln!(
        w,
        "| total | {} | |\n\nServer restarts (kill -9 or SIGTERM): {:?}; processes started per server: {starts:?}; \
         faults that had to wait for another to be repaired first: {}.",
        faults.len(),
        restarts(faults),
        run.waits
    );
    let _ = writeln!(w, "\n## Storage faults\n");
    let restores: Vec<&FaultRecord> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::BackInTime)
        .collect();
    let _ = writeln!(
        w,
        "Back in time (a database's biz rows restored from a backup): {}.\n",
        restores.len()
    );
    fault_lines(w, &restores);
    let fills: Vec<&FaultRecord> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::DiskFull)
        .collect();
    let outcomes = ctx.disk_full.lock().unwrap().clone();
    let on = |db: usize| outcomes.iter().filter(move |o| o.target == db);
    let _ = writeln!(
        w,
        "\nDisk full (a {TMPFS_MB} MB tmpfs filled until ENOSPC): {}.\n\n\
         - PostgreSQL ({}): {} fills; logged ENOSPC in {}, PANICked in {}, reinitialized itself in {}, \
         and exited (restarted by the harness) in {}.\n\
         - MariaDB ({}): {} fills; logged the disk full in {}; killed (-9) while full in {}, \
         of which started again on the full disk in {}.\n",
        fills.len(),
        db_name(DISK_DB),
        on(DISK_DB).count(),
        on(DISK_DB).filter(|o| o.enospc > 0).count(),
        on(DISK_DB).filter(|o| o.panics > 0).count(),
        on(DISK_DB).filter(|o| o.reinitialized).count(),
        on(DISK_DB).filter(|o| o.restarted).count(),
        db_name(MARIA_DB),
        on(MARIA_DB).count(),
        on(MARIA_DB).filter(|o| o.enospc > 0).count(),
        on(MARIA_DB).filter(|o| o.killed).count(),
        on(MARIA_DB).filter(|o| o.started_full).count(),
    );
    fault_lines(w, &fills);
    layout_section(w, &ctx.layout_log.lock().unwrap());
    let _ = writeln!(w, "\n<details><summary>Fault timeline</summary>\n");
    let _ = writeln!(
        w,
        "| t (s) | until | fault | target | hold | note |\n| ---: | ---: | --- | --- | ---: | --- |"
    );
    for f in faults {
        let target = if f.kind.on_database() || f.kind.on_layout() {
            db_name(f.target)
        } else {
            format!("server {}", f.target)
        };
        let _ = writeln!(
            w,
            "| {:.1} | {:.1} | {:?} | {target} | {:.1} s | {} |",
            f.start,
            f.end,
            f.kind,
            f.hold.as_secs_f64(),
            f.note.replace('\n', " ").replace('|', "/")
        );
    }
    let _ = writeln!(w, "\n</details>");
    r
}

/// Copies the report and every log to `out`.
pub(crate) fn keep(ctx: &Ctx, report: &str, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(out.join("report.md"), report).unwrap();
    for server in &ctx.servers {
        let _ = std::fs::copy(
            &server.log,
            out.join(format!("server-{}.log", server.index)),
        );
    }
    for db in &ctx.databases {
        let _ = std::fs::copy(db.log(), out.join(format!("{}.log", db.name())));
    }
}

/// One line per fault of `faults`: when, which database, and its note.
fn fault_lines(w: &mut String, faults: &[&FaultRecord]) {
    use std::fmt::Write as _;
    for f in faults {
        let _ = writeln!(
            w,
            "- t = {:.1}–{:.1} s, {}: {}",
            f.start,
            f.end,
            db_name(f.target),
            f.note.replace('\n', " ")
        );
    }
}
