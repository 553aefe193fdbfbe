//! The faults: choosing, injecting and watching each one.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FaultKind {
    ServerKill,
    ServerTerm,
    ServerStop,
    DbStop,
    DbKill,
    DbStall,
    BackInTime,
    DiskFull,
    Layout,
    LayoutMissing,
    LayoutRace,
    LayoutKill,
}

pub(crate) const FAULT_KINDS: [FaultKind; 12] = [
    FaultKind::ServerKill,
    FaultKind::ServerTerm,
    FaultKind::ServerStop,
    FaultKind::DbStop,
    FaultKind::DbKill,
    FaultKind::DbStall,
    FaultKind::BackInTime,
    FaultKind::DiskFull,
    FaultKind::Layout,
    FaultKind::LayoutMissing,
    FaultKind::LayoutRace,
    FaultKind::LayoutKill,
];

impl FaultKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            FaultKind::ServerKill => "segmint `kill -9`, restarted on its port",
            FaultKind::ServerTerm => "segmint SIGTERM (graceful stop, IDs given back), restarted",
            FaultKind::ServerStop => "segmint frozen (SIGSTOP … SIGCONT)",
            FaultKind::DbStop => {
                "database stopped (PostgreSQL `pg_ctl stop -m immediate`, MariaDB SIGTERM), restarted"
            }
            FaultKind::DbKill => "database `kill -9` (the postmaster, or `mariadbd`), restarted",
            FaultKind::DbStall => "database biz rows locked (`FOR UPDATE`, then a sleep)",
            FaultKind::BackInTime => {
                "database biz rows restored from a backup taken seconds before, fenced, then `segmint db fence`"
            }
            FaultKind::DiskFull => {
                "database file system full (its tmpfs filled with a ballast file), then freed"
            }
            FaultKind::Layout => {
                "layout change: a database taken out (`segmint db remove`, the others move to 2 classes), then brought back (`segmint db add`)"
            }
            FaultKind::LayoutMissing => {
                "`segmint db remove` / `db add` with a configuration missing a database: refused, naming it, nothing changed"
            }
            FaultKind::LayoutRace => {
                "two `segmint db` layout commands started together (two removes, one twice, or remove and add): one epoch, one winner"
            }
            FaultKind::LayoutKill => {
                "`segmint db remove` / `db add` killed (SIGKILL) midway, then the same or the opposite command run to completion"
            }
        }
    }

    /// A fault of `segmint db` layout commands: one runs at a time.
    pub(crate) fn on_layout(self) -> bool {
        matches!(
            self,
            FaultKind::Layout
                | FaultKind::LayoutMissing
                | FaultKind::LayoutRace
                | FaultKind::LayoutKill
        )
    }

    /// Whether this layout fault and the database fault `other` never run together
    /// (the one that comes second waits for the first to be repaired):
    /// - a change needs every database answering: not with a database stopped, killed
    ///   or full (a command that fails all the same is run again); a stall only holds
    ///   it up, or fails it on a statement timeout until the stall ends (run again);
    /// - a change would move a restored database's rows before `db fence` raises them:
    ///   not with a back-in-time fault;
    /// - two commands started together are judged by how each ended: not with any
    ///   database fault, which could refuse both.
    ///
    /// The commands of the missing-database fault must be refused whatever else is
    /// down: it keeps none out.
    pub(crate) fn keeps_out(self, other: FaultKind) -> bool {
        match self {
            FaultKind::LayoutRace => other.on_database(),
            FaultKind::Layout | FaultKind::LayoutKill => matches!(
                other,
                FaultKind::DbStop | FaultKind::DbKill | FaultKind::DiskFull | FaultKind::BackInTime
            ),
            _ => false,
        }
    }

    pub(crate) fn on_database(self) -> bool {
        matches!(
            self,
            FaultKind::DbStop
                | FaultKind::DbKill
                | FaultKind::DbStall
                | FaultKind::BackInTime
                | FaultKind::DiskFull
        )
    }

    /// How long the fault holds (down time, freeze, lock), drawn from the schedule.
    pub(crate) fn hold(self, rng: &mut Rng) -> Duration {
        match self {
            FaultKind::ServerKill => rng.millis(0, 1500),
            FaultKind::ServerTerm => Duration::ZERO,
            FaultKind::ServerStop => rng.millis(1000, 3000),
            FaultKind::DbStop => rng.millis(1000, 4000),
            FaultKind::DbKill => rng.millis(0, 2000),
            FaultKind::DbStall => rng.millis(3000, 6000),
            // From the backup to the restore.
            FaultKind::BackInTime => rng.millis(2000, 4000),
            FaultKind::DiskFull => rng.millis(2000, 4000),
            // Out of the layout.
            FaultKind::Layout => rng.millis(2000, 5000),
            // Refused commands: nothing to hold.
            FaultKind::LayoutMissing => Duration::ZERO,
            // The winner's layout, before the configured one is restored.
            FaultKind::LayoutRace => rng.millis(0, 1000),
            // From the kill to the command run again.
            FaultKind::LayoutKill => rng.millis(0, 1500),
        }
    }
}

pub(crate) struct FaultRecord {
    pub(crate) kind: FaultKind,
    pub(crate) target: usize,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) hold: Duration,
    pub(crate) note: String,
}

/// How long past its time a run may go on dealing its first deck.
pub(crate) const OVERTIME_MAX: Duration = Duration::from_secs(180);

/// Which servers and databases a fault is acting on.
#[derive(Default)]
pub(crate) struct Busy {
    /// Servers a fault is acting on.
    pub(crate) servers: [bool; SERVERS],
    /// The database a fault takes away (down or stalled): at most one at a time.
    pub(crate) database: Option<usize>,
    /// That fault.
    pub(crate) database_fault: Option<FaultKind>,
    /// The database a back-in-time fault is acting on, from its backup until its fence
    /// is lifted: no other fault touches it, and since at most one other database is
    /// taken away meanwhile, one more stays up to witness its reservations.
    pub(crate) restored: Option<usize>,
    /// The layout fault under way: at most one at a time.
    pub(crate) layout: Option<FaultKind>,
}

/// Every 1.6 to 4.1 s, starts the next fault of a deck, passing over those that would
/// break the rules now (see [`pick`]) and waiting when all left would. Faults overlap
/// otherwise. Returns once the last fault is repaired, with how many faults had to
/// wait.
///
/// The deck holds every kind and a kill of every server, then a second freeze and a
/// second stall: 16 faults, a round as long as the 13 of the deck before the layout
/// commands at 2 to 5 s each. Its first part is ordered by how long each keeps others
/// waiting: the layout faults (one at a time, 1 to 10 s each), then the database faults
/// (one at a time, most of them not with a layout change), then the server faults, each
/// group shuffled. Those that wait go first and the server faults fill the gaps.
///
/// With `whole_deck`, faults go on past `until` until the first deck is dealt (for at
/// most [`OVERTIME_MAX`] more), so that the run injects every kind however slow the
/// machine is: on a loaded 2-core machine a 60 s run once ended with the database
/// faults, which wait for one another, not all dealt.
pub(crate) async fn inject(
    ctx: Arc<Ctx>,
    mut rng: Rng,
    until: Instant,
    whole_deck: bool,
) -> (Vec<FaultRecord>, usize) {
    let busy = Arc::new(Mutex::new(Busy::default()));
    let mut running = JoinSet::new();
    let mut deck: Vec<(FaultKind, Option<usize>)> = Vec::new();
    let mut waits = 0;
    let mut rounds = 0;
    loop {
        let pause = rng.millis(1600, 4100);
        let now = Instant::now();
        let dealt = !whole_deck || rounds > 1 || (rounds == 1 && deck.is_empty());
        if now + pause >= until && dealt {
            tokio::time::sleep(until.saturating_duration_since(now)).await;
            break;
        }
        if now >= until + OVERTIME_MAX {
            // The audit finds the kinds never dealt.
            break;
        }
        tokio::time::sleep(pause).await;
        watch_for_crashes(&ctx, &busy);
        if deck.is_empty() {
            // The first round restores and kills the MariaDB database; later rounds
            // draw their targets.
            let on_maria = (rounds == 0).then_some(MARIA_DB);
            rounds += 1;
            let groups = [
                vec![
                    (FaultKind::Layout, None),
                    (FaultKind::LayoutMissing, None),
                    (FaultKind::LayoutRace, None),
                    (FaultKind::LayoutKill, None),
                ],
                vec![
                    (FaultKind::BackInTime, on_maria),
                    (FaultKind::DbStop, None),
                    (FaultKind::DbKill, on_maria),
                    (FaultKind::DbStall, None),
                    (FaultKind::DiskFull, Some(DISK_DB)),
                    (FaultKind::DiskFull, Some(MARIA_DB)),
                ],
                vec![
                    (FaultKind::ServerKill, Some(0)),
                    (FaultKind::ServerKill, Some(1)),
                    (FaultKind::ServerKill, Some(2)),
                    (FaultKind::ServerTerm, None),
                    (FaultKind::ServerStop, None),
                ],
                vec![(FaultKind::ServerStop, None), (FaultKind::DbStall, None)],
            ];
            for mut group in groups {
                rng.shuffle(&mut group);
                deck.extend(group);
            }
        }
        // A fault the rules forbid now waits for the one in its way to be repaired.
        let mut waited = false;
        let chosen = loop {
            if let Some(chosen) = pick(&mut deck, &busy, &mut rng) {
                break Some(chosen);
            }
            let now = Instant::now();
            if now >= until && (!whole_deck || rounds > 1 || now >= until + OVERTIME_MAX) {
                break None;
            }
            if !waited {
                waited = true;
                waits += 1;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let Some((kind, target, hold)) = chosen else {
            break;
        };
        // The fault's own choices (which commands, when to kill), from the schedule.
        let draws = Rng::new(rng.next());
        let (ctx, busy) = (ctx.clone(), busy.clone());
        running.spawn(async move {
            let start = ctx.now();
            eprintln!("chaos: t={start:.1}s {kind:?} on {target} for {hold:?}");
            let note = match run_fault(&ctx, kind, target, hold, draws).await {
                Ok(note) => note,
                Err(e) => {
                    ctx.anomaly(format!("{kind:?} on {target}: {e}"));
                    format!("FAILED: {e}")
                }
            };
            let mut b = busy.lock().unwrap();
            if kind.on_layout() {
                b.layout = None;
            } else if kind == FaultKind::BackInTime {
                b.restored = None;
            } else if kind.on_database() {
                b.database = None;
                b.database_fault = None;
            } else {
                b.servers[target] = false;
            }
            FaultRecord {
                kind,
                target,
                start,
                end: ctx.now(),
                hold,
                note,
            }
        });
    }
    let mut records = Vec::new();
    while let Some(r) = running.join_next().await {
        records.push(r.expect("fault task"));
    }
    watch_for_crashes(&ctx, &busy);
    records.sort_by(|a, b| a.start.total_cmp(&b.start));
    (records, waits)
}

/// Takes the first fault of the deck that the rules allow now (at most one database
/// taken away at a time, never the one going back in time; at most one back-in-time
/// fault at a time; at most one layout fault, never with a database fault it keeps out
/// (see [`FaultKind::keeps_out`]); at least one server untouched), draws its target if
/// the deck left it open and how long it holds, and marks its target busy.
pub(crate) fn pick(
    deck: &mut Vec<(FaultKind, Option<usize>)>,
    busy: &Mutex<Busy>,
    rng: &mut Rng,
) -> Option<(FaultKind, usize, Duration)> {
    let mut b = busy.lock().unwrap();
    let servers_busy = b.servers.iter().filter(|&&x| x).count();
    let i = deck.iter().position(|&(kind, target)| {
        if kind.on_layout() {
            b.layout.is_none()
                && b.database_fault.is_none_or(|f| !kind.keeps_out(f))
                && (b.restored.is_none() || !kind.keeps_out(FaultKind::BackInTime))
        } else if b.layout.is_some_and(|l| l.keeps_out(kind)) {
            false
        } else if kind == FaultKind::BackInTime {
            b.restored.is_none() && target.is_none_or(|d| b.database != Some(d))
        } else if kind.on_database() {
            b.database.is_none() && target.is_none_or(|d| b.restored != Some(d))
        } else {
            servers_busy + 1 < SERVERS && target.is_none_or(|s| !b.servers[s])
        }
    })?;
    let (kind, target) = deck.remove(i);
    let target = target.unwrap_or_else(|| {
        if kind.on_layout() {
            rng.below(DATABASES)
        } else if kind.on_database() {
            let taken = if kind == FaultKind::BackInTime {
                b.database
            } else {
                b.restored
            };
            let free: Vec<usize> = (0..DATABASES).filter(|&d| taken != Some(d)).collect();
            free[rng.below(free.len())]
        } else {
            let free: Vec<usize> = (0..SERVERS).filter(|&s| !b.servers[s]).collect();
            free[rng.below(free.len())]
        }
    });
    if kind.on_layout() {
        b.layout = Some(kind);
    } else if kind == FaultKind::BackInTime {
        b.restored = Some(target);
    } else if kind.on_database() {
        b.database = Some(target);
        b.database_fault = Some(kind);
    } else {
        b.servers[target] = true;
    }
    Some((kind, target, kind.hold(rng)))
}

/// A server no fault is acting on must be running: one that exited on its own is an
/// anomaly (a crash), and is restarted.
pub(crate) fn watch_for_crashes(ctx: &Ctx, busy: &Mutex<Busy>) {
    let b = busy.lock().unwrap();
    for (s, server) in ctx.servers.iter().enumerate() {
        if !b.servers[s]
            && let Some(status) = server.exited()
        {
            ctx.anomaly(format!(
                "server {s} exited on its own ({status})\n{}",
                server.log_tail()
            ));
            drop(server.take());
            ctx.start_server(s, "after an unexpected exit");
        }
    }
}

/// Applies one fault and repairs it; a note for the timeline.
pub(crate) async fn run_fault(
    ctx: &Ctx,
    kind: FaultKind,
    target: usize,
    hold: Duration,
    draws: Rng,
) -> Result<String, String> {
    match kind {
        FaultKind::ServerKill | FaultKind::ServerTerm => {
            let server = &ctx.servers[target];
            let note = if kind == FaultKind::ServerKill {
                server.kill9()?;
                String::new()
            } else {
                let began = Instant::now();
                let status = server.terminate(Duration::from_secs(15)).await?;
                if !status.success() {
                    return Err(format!(
                        "graceful stop exited with {status}\n{}",
                        server.log_tail()
                    ));
                }
                format!("stopped in {:.2} s", began.elapsed().as_secs_f64())
            };
            tokio::time::sleep(hold).await;
            ctx.start_server(target, &format!("after {kind:?}"));
            let began = Instant::now();
            server
                .wait_healthy(RECOVERY)
                .await
                .map_err(|e| format!("restart: {e}\n{}", server.log_tail()))?;
            Ok(
                format!("{note} back in {:.2} s", began.elapsed().as_secs_f64())
                    .trim()
                    .to_string(),
            )
        }
        FaultKind::ServerStop => {
            let server = &ctx.servers[target];
            server.signal("STOP")?;
            tokio::time::sleep(hold).await;
            server.signal("CONT")?;
            Ok(String::new())
        }
        FaultKind::DbStop | FaultKind::DbKill => {
            let db = &ctx.databases[target];
            let note = if kind == FaultKind::DbStop {
                db.stop().await?;
                String::new()
            } else {
                db.kill9().await?
            };
            tokio::time::sleep(hold).await;
            let began = Instant::now();
            let attempts = db.restart().await?;
            Ok(format!(
                "{note}restarted in {:.2} s ({attempts} attempt{})",
                began.elapsed().as_secs_f64(),
                if attempts == 1 { "" } else { "s" }
            ))
        }
        FaultKind::BackInTime => back_in_time(ctx, target, hold).await,
        FaultKind::Layout => layout_change(ctx, target, hold).await,
        FaultKind::LayoutMissing => layout_missing(ctx, target, draws).await,
        FaultKind::LayoutRace => layout_race(ctx, target, hold, draws).await,
        FaultKind::LayoutKill => layout_kill(ctx, target, hold, draws).await,
        FaultKind::DiskFull => disk_full(ctx, target, hold).await,
        FaultKind::DbStall => {
            let db = &ctx.databases[target];
            let sleep = match &*db.engine {
                Engine::Postgres(_) => "pg_sleep",
                Engine::Maria(_) => "SLEEP",
            };
            let sql = format!(
                "BEGIN; SELECT * FROM tiny_id_info WHERE biz_type IN ('chaos', 'odd') FOR UPDATE; SELECT {sleep}({:.3}); COMMIT;",
                hold.as_secs_f64()
            );
            let mut psql = db.engine.sql_background(&sql);
            let deadline = Instant::now() + hold + Duration::from_secs(15);
            loop {
                if let Some(status) = psql.0.try_wait().map_err(|e| e.to_string())? {
                    return if status.success() {
                        Ok(String::new())
                    } else {
                        // The lock was taken or not: either way the database was in use.
                        Ok(format!("the client exited with {status}"))
                    };
                }
                if Instant::now() > deadline {
                    return Err("the locking client did not finish".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Longest the servers may take to show a restored database fenced on `/readyz`, and to
/// use it again once `segmint db fence` raised it: a catalog refresh (1 s here), plus a
/// server frozen or restarting meanwhile.
pub(crate) const FENCE_SEEN: Duration = Duration::from_secs(15);
/// How long a restored database stays fenced before the operator raises it, so that
/// servers restarted meanwhile meet it fenced too.
pub(crate) const FENCE_HELD: Duration = Duration::from_secs(2);

/// Whether server `base` shows database `name` fenced on `/readyz`: the reason if it
/// does, `Some(None)` if it does not, `None` when it does not answer.
pub(crate) async fn fence_shown(
    http: &reqwest::Client,
    base: &str,
    name: &str,
) -> Option<Option<String>> {
    let r = http.get(format!("{base}/readyz")).send().await.ok()?;
    let body: serde_json::Value = r.json().await.ok()?;
    let db = body["databases"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)?;
    Some(db["fenced"].as_str().map(str::to_string))
}

/// What one server showed while the harness watched a fence.
pub(crate) enum Seen {
    /// It showed what was awaited at this time (seconds into the run); whether its
    /// process started after the watch began (a fresh server); the fence's reason.
    At(f64, bool, Option<String>),
    /// It answered, but never as awaited.
    Never,
    /// It never answered (killed or frozen the whole time).
    Silent,
}

/// Polls every server's `/readyz` until each shows `name` fenced (`fenced`) or not,
/// for at most [`FENCE_SEEN`].
pub(crate) async fn watch_fence(ctx: &Ctx, name: &str, fenced: bool) -> Vec<Seen> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let starts: Vec<u32> = ctx
        .starts
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .collect();
    let mut seen: Vec<Seen> = (0..SERVERS).map(|_| Seen::Silent).collect();
    let deadline = Instant::now() + FENCE_SEEN;
    while Instant::now() < deadline {
        let mut asks = JoinSet::new();
        for (s, server) in ctx.servers.iter().enumerate() {
            if !matches!(seen[s], Seen::At(..)) {
                let (http, base, name) = (http.clone(), server.base.clone(), name.to_string());
                asks.spawn(async move { (s, fence_shown(&http, &base, &name).await) });
            }
        }
        if asks.is_empty() {
            break;
        }
        while let Some(asked) = asks.join_next().await {
            let (s, shown) = asked.expect("readyz task");
            match shown {
                Some(reason) if reason.is_some() == fenced => {
                    let fresh = ctx.starts[s].load(Ordering::SeqCst) > starts[s];
                    seen[s] = Seen::At(ctx.now(), fresh, reason);
                }
                Some(_) => seen[s] = Seen::Never,
                None => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// One line on what the servers showed since `since` (seconds into the run); the
/// servers that answered but never showed it.
pub(crate) fn seen_note(seen: &[Seen], since: f64) -> (String, Vec<usize>) {
    let mut parts = Vec::new();
    let mut never = Vec::new();
    for (s, seen) in seen.iter().enumerate() {
        parts.push(match seen {
            Seen::At(at, fresh, _) => format!(
                "server {s} +{:.1} s{}",
                at - since,
                if *fresh { " (restarted since)" } else { "" }
            ),
            Seen::Never => {
                never.push(s);
                format!("server {s} NEVER")
            }
            Seen::Silent => format!("server {s} did not answer"),
        });
    }
    (parts.join(", "), never)
}

/// A restore from backup: takes a backup of database `target`'s biz rows, lets the
/// servers reserve from it for `hold`, and sets its rows back to the backup. Every
/// server must then show it fenced on `/readyz`; after [`FENCE_HELD`] the real
/// `segmint db fence` raises it (retried while another database is down), and every
/// server must use it again. The scheduler keeps the other databases from being taken
/// away together meanwhile, so each reservation is witnessed somewhere.
pub(crate) async fn back_in_time(
    ctx: &Ctx,
    target: usize,
    hold: Duration,
) -> Result<String, String> {
    let db = &ctx.databases[target];
    let name = db.name();
    let backup = db
        .sql("SELECT biz_type, max_id, version FROM tiny_id_info ORDER BY biz_type".into())
        .await?;
    let backed_up = ctx.now();
    let rows: Vec<Vec<&str>> = backup
        .lines()
        .map(|line| line.split('|').collect())
        .collect();
    if rows.is_empty() {
        return Err(format!("{name} has no biz rows to back up"));
    }
    tokio::time::sleep(hold).await;
    // The rows as the backup has them, in one transaction that first locks each row to
    // read how far it had gone: `biz_type|versions set back` lines.
    let restore = match &*db.engine {
        Engine::Postgres(_) => {
            let values: Vec<String> = rows
                .iter()
                .map(|f| format!("('{}', {}::bigint, {}::bigint)", f[0], f[1], f[2]))
                .collect();
            format!(
                "WITH backup(biz_type, max_id, version) AS (VALUES {}), \
                 now AS (SELECT t.biz_type, t.version FROM tiny_id_info t JOIN backup USING (biz_type) FOR UPDATE OF t) \
                 UPDATE tiny_id_info t SET max_id = backup.max_id, version = backup.version \
                 FROM backup JOIN now USING (biz_type) WHERE t.biz_type = backup.biz_type \
                 RETURNING t.biz_type, now.version - backup.version",
                values.join(", ")
            )
        }
        Engine::Maria(_) => {
            let backup: Vec<String> = rows
                .iter()
                .map(|f| {
                    format!(
                        "SELECT '{}' AS biz_type, {} AS max_id, {} AS version",
                        f[0], f[1], f[2]
                    )
                })
                .collect();
            let backup = backup.join(" UNION ALL ");
            format!(
                "BEGIN; \
                 SELECT t.biz_type, t.version - b.version FROM tiny_id_info t JOIN ({backup}) b \
                 ON t.biz_type = b.biz_type ORDER BY t.biz_type FOR UPDATE; \
                 UPDATE tiny_id_info t JOIN ({backup}) b ON t.biz_type = b.biz_type \
                 SET t.max_id = b.max_id, t.version = b.version; \
                 COMMIT"
            )
        }
    };
    let restored_rows = db.sql(restore).await?;
    let restored = ctx.now();
    let set_back: Vec<(String, i64)> = restored_rows
        .lines()
        .filter_map(|l| {
            let (biz, by) = l.split_once('|')?;
            Some((biz.to_string(), by.parse().ok()?))
        })
        .collect();
    let what = format!(
        "backup at t={backed_up:.1}s, restored at t={restored:.1}s: {} rows set back by {} versions",
        set_back.len(),
        set_back
            .iter()
            .map(|(biz, by)| format!("{by} (`{biz}`)"))
            .collect::<Vec<_>>()
            .join(" and ")
    );
    eprintln!("chaos: t={restored:.1}s {name}: {what}");
    if set_back.iter().all(|(_, by)| *by == 0) {
        return Err(format!(
            "{what}: nothing was reserved there meanwhile, so nothing went back in time"
        ));
    }

    let fenced = watch_fence(ctx, &name, true).await;
    let (fenced_note, never) = seen_note(&fenced, restored);
    let reason = fenced.iter().find_map(|s| match s {
        Seen::At(_, _, Some(reason)) => Some(reason.clone()),
        _ => None,
    });
    if !never.is_empty() || reason.is_none() {
        return Err(format!(
            "{what}; servers {never:?} answered /readyz without showing {name} fenced within {FENCE_SEEN:?} ({fenced_note})"
        ));
    }
    let reason = reason.unwrap_or_default();
    if !reason.contains("gone back in time") {
        return Err(format!("{what}; fenced for another reason: {reason}"));
    }

    tokio::time::sleep(FENCE_HELD).await;
    let ran = db_command(ctx, &["fence", &name])
        .await
        .map_err(|e| format!("{what}; {e}"))?;
    let (raised, attempts) = (ran.out, ran.failed.len() + 1);
    let lifted = ctx.now();
    let raised_rows = raised.lines().filter(|l| l.contains("raised from")).count();
    if raised_rows == 0 {
        return Err(format!(
            "{what}; `segmint db fence {name}` raised nothing: {raised}"
        ));
    }
    let used = watch_fence(ctx, &name, false).await;
    let (used_note, never) = seen_note(&used, lifted);
    if !never.is_empty() {
        return Err(format!(
            "{what}; servers {never:?} still showed {name} fenced {FENCE_SEEN:?} after `segmint db fence` ({used_note})"
        ));
    }
    Ok(format!(
        "{what}; shown fenced by {fenced_note} (\"{}\"); `segmint db fence {name}` at t={lifted:.1}s \
         ({attempts} attempt{}) raised {raised_rows} rows; used again by {used_note}",
        reason.chars().take(200).collect::<String>(),
        if attempts == 1 { "" } else { "s" }
    ))
}

/// What a database did while its file system was full, from its log and its process.
#[derive(Default, Clone, Copy)]
pub(crate) struct DiskOutcome {
    /// The database filled.
    pub(crate) target: usize,
    /// Log lines saying the disk is full: PostgreSQL's `No space left on device`
    /// (errors and the PANIC among them), MariaDB's `error 28` and `is full`.
    pub(crate) enospc: usize,
    /// PANICs: PostgreSQL's answer to a WAL write that fails.
    pub(crate) panics: usize,
    /// Whether the postmaster ended its backends and reinitialized on its own.
    pub(crate) reinitialized: bool,
    /// Whether `mariadbd` was killed (-9) while the disk was full.
    pub(crate) killed: bool,
    /// Whether the server was started again while the disk was still full.
    pub(crate) started_full: bool,
    /// Whether the server's main process exited (or was killed), so that the harness
    /// had to start it again.
    pub(crate) restarted: bool,
}

/// Fills the tmpfs of database `target` with a ballast file until `ENOSPC`, holds it
/// full for `hold`, deletes the ballast, and brings the database back if it crashed
/// (as the crash faults do). Returns a note on what the database did.
///
/// Every other disk-full fault of each database (the first included) goes further, as
/// a burst of writes or a crash would while the disk is full:
/// - PostgreSQL: the run's traffic writes less than one WAL segment in a few seconds,
///   and PostgreSQL keeps recycled segments ahead, so a full disk mostly costs it a few
///   failed writes. The fault switches WAL segments until PostgreSQL needs a new
///   segment file: the WAL write that then fails is its PANIC.
/// - MariaDB: InnoDB writes its redo log into a file of fixed size and updates rows in
///   pages it has, so reservations commit on a full disk (only what needs new pages
///   fails, with "The table is full"). The fault kills `mariadbd` (-9) while the disk
///   is full and starts it again on the full disk: crash recovery on what was
///   committed full, with no room to grow.
pub(crate) async fn disk_full(ctx: &Ctx, target: usize, hold: Duration) -> Result<String, String> {
    let db = &ctx.databases[target];
    let name = db.name();
    let Some(tmpfs) = &db.disk else {
        return Err(format!("{name} is not on a tmpfs"));
    };
    let log_from = std::fs::metadata(db.log()).map_or(0, |m| m.len());
    let pid = db.engine.pid()?;
    let children = children_of(pid);
    let ballast = tmpfs.ballast();
    let path = ballast.clone();
    let began = Instant::now();
    let filled = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let mut file = std::fs::File::create(&path).map_err(|e| format!("create ballast: {e}"))?;
        let chunk = vec![0u8; 1 << 20];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                // ENOSPC: the file system is full, which is the point.
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => return Err(format!("write ballast: {e}")),
            }
        }
        file.metadata()
            .map(|m| m.len())
            .map_err(|e| format!("ballast size: {e}"))
    })
    .await
    .map_err(|e| e.to_string())??;
    let fill_secs = began.elapsed().as_secs_f64();
    let held_until = Instant::now() + hold;
    let mut outcome = DiskOutcome {
        target,
        ..DiskOutcome::default()
    };
    let burst = ctx
        .disk_full
        .lock()
        .unwrap()
        .iter()
        .filter(|o| o.target == target)
        .count()
        .is_multiple_of(2);
    let mut burst_note = String::new();
    if burst {
        match &*db.engine {
            Engine::Postgres(_) => {
                let mut switches = 0;
                for _ in 0..5 {
                    if !alive(pid) || Instant::now() >= held_until {
                        break;
                    }
                    // Fails once PostgreSQL is down: that is what it is for.
                    if db.sql("SELECT pg_switch_wal()".into()).await.is_ok() {
                        switches += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                burst_note = format!("WAL segment switches while full: {switches}; ");
            }
            Engine::Maria(_) => {
                db.kill9().await?;
                outcome.killed = true;
                outcome.restarted = true;
                // Once: a server that cannot start on the full disk is started again
                // below, once the ballast is gone.
                let started = db
                    .blocking("start on the full disk", |e| {
                        if let Engine::Maria(m) = e {
                            m.start_again()
                        }
                    })
                    .await;
                outcome.started_full = started.is_ok();
                burst_note = match started {
                    Ok(()) => {
                        "killed (-9) while full and started again on the full disk; ".to_string()
                    }
                    Err(e) => format!(
                        "killed (-9) while full; did not start on the full disk ({}); ",
                        e.chars().take(140).collect::<String>()
                    ),
                };
            }
        }
    }
    tokio::time::sleep(held_until.saturating_duration_since(Instant::now())).await;
    std::fs::remove_file(&ballast).map_err(|e| format!("remove ballast: {e}"))?;

    // Either the database answers again on its own (after errors, or a crash it
    // recovered from), or its main process has exited and is started again.
    let deadline = Instant::now() + RECOVERY;
    let mut back = String::new();
    loop {
        if !db.engine.pid().is_ok_and(alive) {
            let gone = Instant::now() + Duration::from_secs(15);
            while children.iter().any(|&c| alive(c)) && Instant::now() < gone {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let restarting = Instant::now();
            let attempts = db.restart().await?;
            outcome.restarted = true;
            back = format!(
                "; the server had exited: restarted in {:.2} s ({attempts} attempt{})",
                restarting.elapsed().as_secs_f64(),
                if attempts == 1 { "" } else { "s" }
            );
            break;
        }
        if db.sql("SELECT 1".into()).await.is_ok() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name} did not answer within {RECOVERY:?} of the ballast's removal"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let log = std::fs::read(db.log()).unwrap_or_default();
    let log = String::from_utf8_lossy(log.get(log_from as usize..).unwrap_or_default());
    let full = |l: &str| {
        l.contains("No space left on device") || l.contains("error 28") || l.contains("is full")
    };
    outcome.enospc = log.lines().filter(|l| full(l)).count();
    outcome.panics = log.lines().filter(|l| l.contains("PANIC:")).count();
    outcome.reinitialized = log.contains("reinitializing");
    let first_error = log
        .lines()
        .find(|l| full(l))
        .and_then(|l| l.split_once("]").map(|(_, rest)| rest.trim().to_string()))
        .unwrap_or_default();
    ctx.disk_full.lock().unwrap().push(outcome);
    Ok(format!(
        "{:.1} MB of ballast filled the {TMPFS_MB} MB tmpfs in {fill_secs:.2} s; held full {:.1} s; \
         {burst_note}{} logged {} disk-full line{}, {} PANIC{}{}{}{}",
        filled as f64 / (1 << 20) as f64,
        hold.as_secs_f64(),
        db.product(),
        outcome.enospc,
        if outcome.enospc == 1 { "" } else { "s" },
        outcome.panics,
        if outcome.panics == 1 { "" } else { "s" },
        if outcome.reinitialized {
            ", ended its backends and reinitialized"
        } else {
            ""
        },
        back,
        if first_error.is_empty() {
            String::new()
        } else {
            format!(
                " (first: {})",
                first_error.chars().take(140).collect::<String>()
            )
        }
    ))
}
