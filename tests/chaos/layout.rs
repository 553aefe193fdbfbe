//! The layout faults: the operator's `segmint db remove` / `db add` while the servers
//! serve, run as planned, with a database missing from the configuration, two at once,
//! and killed midway. Each ends with the cluster back in its configured layout
//! (`pg0`, `maria1`, `pg2` issuing 0, 1, 2 mod 3, no change under way, no row frozen), so
//! that the next fault, and the run's final audit, find it as set up.

use super::*;

/// The layout as set up, as `segmint db` describes it.
pub(crate) fn configured() -> String {
    (0..DATABASES)
        .map(|d| format!("{} ({d} mod {DATABASES})", db_name(d)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the layout faults saw, for the report's checks and totals.
#[derive(Default)]
pub(crate) struct LayoutLog {
    pub(crate) missing: Vec<MissingRun>,
    pub(crate) races: Vec<RaceRun>,
    pub(crate) kills: Vec<KillRun>,
}

/// A command run with a configuration missing a database: it must be refused, naming
/// that database, and change nothing.
pub(crate) struct MissingRun {
    pub(crate) at: f64,
    pub(crate) command: String,
    pub(crate) missing: usize,
    pub(crate) code: Option<i32>,
    /// Whether its message names the missing database.
    pub(crate) named: bool,
    /// No layout was stored yet: the command may have nothing to name the missing
    /// database by (no layout names it, nor a witness until a server reserved from it),
    /// and must be refused all the same.
    pub(crate) first: bool,
    pub(crate) message: String,
    /// `Err` with what differs when the layout or biz rows changed across the fault's
    /// commands.
    pub(crate) unchanged: Result<(), String>,
}

impl MissingRun {
    pub(crate) fn refused(&self) -> bool {
        self.code.is_some_and(|c| c != 0)
    }
}

/// How one of two racing commands ended.
pub(crate) enum Ended {
    /// It made the change: layout epoch `from` → `to`, done.
    Won { from: i64, to: i64 },
    /// It found nothing to do (exit 0).
    NoOp,
    /// It exited non-zero, with this message.
    Refused(String),
    /// It exited 0 without saying it made a change or found none, or was killed at the
    /// harness's limit: what it printed.
    Other(String),
}

impl Ended {
    fn of(run: &DbRun) -> Ended {
        if run.killed {
            return Ended::Other(format!("{}: {}", run.ending(), short(&run.stdout, 300)));
        }
        if !run.ok() {
            return Ended::Refused(run.message());
        }
        Ended::of_output(&run.stdout)
    }

    /// How a command that exited 0 ended, from what it printed.
    fn of_output(stdout: &str) -> Ended {
        let epochs = stdout.lines().find_map(|l| {
            let rest = l.strip_prefix("layout epoch ")?;
            let (from, rest) = rest.split_once(" → ")?;
            let (to, _) = rest.split_once(':')?;
            Some((from.parse().ok()?, to.parse().ok()?))
        });
        match epochs {
            Some((from, to)) if stdout.contains(&format!("layout epoch {to} is done")) => {
                Ended::Won { from, to }
            }
            _ if stdout.contains("already") => Ended::NoOp,
            _ => Ended::Other(format!("exit 0: {}", short(stdout, 300))),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Ended::Won { from, to } => format!("won: epoch {from} → {to}"),
            Ended::NoOp => "no-op (exit 0)".into(),
            Ended::Refused(m) => format!("refused: \"{}\"", short(m, 160)),
            Ended::Other(m) => format!("UNEXPECTED: {m}"),
        }
    }
}

/// Two layout commands started together.
pub(crate) struct RaceRun {
    pub(crate) at: f64,
    pub(crate) commands: [String; 2],
    pub(crate) ended: [Ended; 2],
}

impl RaceRun {
    /// What broke the rule that two commands never both win one epoch (both may win
    /// only one after the other: the second from the epoch the first made), or an
    /// ending that is neither a win, a no-op nor a refusal.
    pub(crate) fn violation(&self) -> Option<String> {
        let both = format!(
            "`{}` {} and `{}` {}",
            self.commands[0],
            self.ended[0].describe(),
            self.commands[1],
            self.ended[1].describe()
        );
        match &self.ended {
            [Ended::Other(_), _] | [_, Ended::Other(_)] => Some(both),
            [Ended::Won { to: b, .. }, Ended::Won { to: d, .. }] if b == d => {
                Some(format!("both won epoch {b}: {both}"))
            }
            [Ended::Won { from: a, to: b }, Ended::Won { from: c, to: d }] if a != d && c != b => {
                Some(format!("both won, neither from the other's epoch: {both}"))
            }
            _ => None,
        }
    }

    pub(crate) fn winners(&self) -> usize {
        self.ended
            .iter()
            .filter(|e| matches!(e, Ended::Won { .. }))
            .count()
    }

    pub(crate) fn exits_0(&self) -> usize {
        self.ended
            .iter()
            .filter(|e| matches!(e, Ended::Won { .. } | Ended::NoOp))
            .count()
    }
}

/// A command killed midway, and the command run after it.
pub(crate) struct KillRun {
    pub(crate) at: f64,
    pub(crate) command: String,
    /// When it was killed: `after 1.20 s` or `after 3 lines`.
    pub(crate) point: String,
    /// Whether it had ended on its own before the kill.
    pub(crate) ended_first: bool,
    /// Whether a change was left under way (its `moving` row).
    pub(crate) cut_off: bool,
    /// The command run after it, and whether it was the same one; `None` when there
    /// was nothing to run (see [`layout_kill`]).
    pub(crate) rerun: Option<(String, bool)>,
    /// Whether the command run after it (one of its runs) first waited for the killed
    /// one's silence.
    pub(crate) waited: bool,
}

/// The layout as `segmint db list` shows it.
pub(crate) struct Listed {
    /// The layout in force: database names and classes (the configured ones before any
    /// change).
    pub(crate) done: String,
    /// The change under way, if any.
    pub(crate) pending: Option<String>,
    /// Per database: its row of the table (`pg0 0 mod 3 in layout 2 0 3`).
    pub(crate) databases: Vec<String>,
    pub(crate) text: String,
}

impl Listed {
    fn parse(text: &str) -> Listed {
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .map(str::to_string)
        };
        Listed {
            done: line("layout epoch ")
                .map(|l| match l.split_once("(done): ") {
                    Some((_, members)) => members.to_string(),
                    // Epoch 0: the configured classes.
                    None => configured(),
                })
                .unwrap_or_default(),
            pending: line("change under way"),
            databases: text
                .lines()
                .filter(|l| (0..DATABASES).any(|d| l.starts_with(&format!("{} ", db_name(d)))))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect(),
            text: text.to_string(),
        }
    }

    /// Whether database `db` is a member of the layout in force, or of the change under
    /// way.
    pub(crate) fn names(&self, db: usize) -> bool {
        let member = format!("{} (", db_name(db));
        self.done.contains(&member) || self.pending.as_ref().is_some_and(|p| p.contains(&member))
    }

    /// As set up: every database in its configured class, in the layout and answering,
    /// no change under way, no row frozen.
    pub(crate) fn configured(&self) -> bool {
        self.done == configured()
            && self.pending.is_none()
            && self.databases.len() == DATABASES
            && self.databases.iter().all(|d| {
                let f: Vec<&str> = d.split(' ').collect();
                f.len() == 9 && f[4..6] == ["in", "layout"] && f[7] == "0"
            })
    }
}

/// `segmint db list` with the servers' configuration (retried while a database does
/// not answer).
pub(crate) async fn list(ctx: &Ctx) -> Result<Listed, String> {
    Ok(Listed::parse(&db_command(ctx, &["list"]).await?.out))
}

/// Brings the cluster back to its configured layout: `segmint db add` of each database
/// the layout in force lacks (which also finishes or supersedes a change left under
/// way), then checks it with `segmint db list`. Returns the commands it ran.
pub(crate) async fn restore(ctx: &Ctx) -> Result<Vec<String>, String> {
    let mut ran = Vec::new();
    for _ in 0..=DATABASES {
        let listed = list(ctx).await?;
        if listed.configured() {
            return Ok(ran);
        }
        let missing = (0..DATABASES).find(|&d| !listed.done.contains(&format!("{} (", db_name(d))));
        // All three in force with a change under way (a removal cut off): adding any
        // supersedes it.
        let Some(db) = missing.or(listed.pending.as_ref().map(|_| 0)) else {
            return Err(format!(
                "the layout is not as configured, and no `segmint db add` can mend it:\n{}",
                listed.text
            ));
        };
        let name = db_name(db);
        let added = db_command(ctx, &["add", &name]).await?;
        ran.push(format!("`db add {name}`{}", added.runs()));
    }
    Err(format!(
        "the layout is not as configured after {}",
        ran.join(", ")
    ))
}

/// [`restore`], as the end of a note.
async fn restored(ctx: &Ctx) -> Result<String, String> {
    let ran = restore(ctx).await?;
    Ok(if ran.is_empty() {
        "layout as configured".into()
    } else {
        format!("restored by {}", ran.join(", "))
    })
}

/// Takes database `target` out of the layout while the servers serve (every biz moves
/// to two classes above every ID issued before), holds, then brings it back (three
/// classes again, as configured). The servers name all three databases throughout:
/// they stop using it, then use it again, without a restart.
pub(crate) async fn layout_change(
    ctx: &Ctx,
    target: usize,
    hold: Duration,
) -> Result<String, String> {
    let name = db_name(target);
    let began = Instant::now();
    let gone = db_command(ctx, &["remove", &name]).await?;
    if !gone.out.contains("is done") && !gone.out.contains(FINISHED_EARLIER) {
        return Err(format!(
            "`segmint db remove {name}` did not finish: {}",
            gone.out
        ));
    }
    let removed_in = began.elapsed();
    tokio::time::sleep(hold).await;
    let began = Instant::now();
    let back = db_command(ctx, &["add", &name]).await?;
    if !back.out.contains(&configured()) {
        return Err(format!(
            "`segmint db add {name}` did not restore {}: {}",
            configured(),
            back.out
        ));
    }
    Ok(format!(
        "out in {:.2} s{}, back in {:.2} s{}",
        removed_in.as_secs_f64(),
        gone.runs(),
        began.elapsed().as_secs_f64(),
        back.runs(),
    ))
}

/// What a layout command may change, on each database (`None` when it does not
/// answer: a database fault may run beside the missing-database fault): the layout rows, and with `bizs`
/// each biz row's class, epoch, freeze and claim (not `max_id` nor `version`, which the
/// servers' reservations move; nor the rest while a change is cut off: the servers
/// then finish its bizs themselves).
async fn layout_rows(ctx: &Ctx, bizs: bool) -> Vec<Option<String>> {
    let mut sql =
        "SELECT epoch, members, state, changed_ms FROM segmint_layout ORDER BY epoch".to_string();
    if bizs {
        sql.push_str(
            "; SELECT biz_type, delta, remainder, layout_epoch, frozen, claimed_by FROM tiny_id_info ORDER BY biz_type",
        );
    }
    let mut rows = Vec::new();
    for db in &ctx.databases {
        rows.push(db.sql(sql.clone()).await.ok());
    }
    rows
}

/// Whether any database holds a layout row: a change was made.
async fn layout_stored(ctx: &Ctx) -> bool {
    for db in &ctx.databases {
        if let Ok(n) = db.sql("SELECT count(*) FROM segmint_layout".into()).await {
            return n.trim() != "0";
        }
    }
    false
}

/// Runs each command of `commands` (`segmint db ARGS`) with the configuration less
/// database `missing`: each must be refused, naming it, and leave the rows of
/// [`layout_rows`] as they were on every database read before and after. Records each
/// in the report's log; a note on each.
async fn run_missing(
    ctx: &Ctx,
    missing: usize,
    commands: &[[&str; 2]],
    bizs: bool,
) -> Result<String, String> {
    let config = config_without(ctx, missing)?;
    let y = db_name(missing);
    let first = !layout_stored(ctx).await;
    let before = layout_rows(ctx, bizs).await;
    let mut runs = Vec::new();
    for args in commands {
        let at = ctx.now();
        runs.push((
            at,
            run_one(DbSpec::new(&config, args, KillAt::Never)).await?,
        ));
    }
    let after = layout_rows(ctx, bizs).await;
    let mut changed = Vec::new();
    let mut unread = Vec::new();
    for (d, (b, a)) in before.iter().zip(&after).enumerate() {
        match (b, a) {
            (Some(b), Some(a)) if a != b => changed.push(format!(
                "{}: {} → {}",
                db_name(d),
                short(b, 300),
                short(a, 300)
            )),
            (Some(_), Some(_)) => {}
            _ => unread.push(db_name(d)),
        }
    }
    let unchanged = match changed.is_empty() {
        true => Ok(()),
        false => Err(changed.join("; ")),
    };
    let mut notes = Vec::new();
    let mut log = ctx.layout_log.lock().unwrap();
    for (at, run) in runs {
        let record = MissingRun {
            at,
            command: run.command.clone(),
            missing,
            code: run.code,
            named: run.message().contains(&format!("\"{y}\"")),
            first,
            message: run.message(),
            unchanged: unchanged.clone(),
        };
        notes.push(format!(
            "`{}` {}{}: \"{}\"",
            record.command.trim_start_matches("segmint "),
            if record.refused() {
                "refused"
            } else {
                "NOT REFUSED"
            },
            if record.refused() && !record.named {
                format!(
                    " without naming {y}{}",
                    if first { " (no layout stored yet)" } else { "" }
                )
            } else {
                String::new()
            },
            short(&record.message, 120)
        ));
        log.missing.push(record);
    }
    Ok(format!(
        "configuration without {y}: {}; {} {}{}",
        notes.join("; "),
        if bizs {
            "layout and biz rows"
        } else {
            "layout rows"
        },
        match &unchanged {
            Ok(()) => "unchanged".to_string(),
            Err(e) => format!("CHANGED: {e}"),
        },
        if unread.is_empty() {
            String::new()
        } else {
            format!(" (not read on {}: down)", unread.join(", "))
        }
    ))
}

/// Runs layout commands with a configuration missing one database (another than
/// `target`): `db remove` and `db add` of `target`, and `db remove` of the missing one
/// (without `--lost`). Each must exit non-zero naming the missing database, and the
/// layout and biz rows must be as before (see [`run_missing`]). A database fault may
/// run meanwhile: the refusal must come all the same, and name the same database.
pub(crate) async fn layout_missing(
    ctx: &Ctx,
    target: usize,
    mut rng: Rng,
) -> Result<String, String> {
    let others: Vec<usize> = (0..DATABASES).filter(|&d| d != target).collect();
    let missing = others[rng.below(others.len())];
    let (x, y) = (db_name(target), db_name(missing));
    run_missing(
        ctx,
        missing,
        &[["remove", &x], ["add", &x], ["remove", &y]],
        true,
    )
    .await
}

/// Starts two layout commands together from the configured layout: `db remove` of
/// `target` and of another database, the same twice, or `db remove` and `db add` of
/// `target`. At most one may win the epoch (see [`RaceRun::violation`]); after `hold`
/// the layout is restored.
pub(crate) async fn layout_race(
    ctx: &Ctx,
    target: usize,
    hold: Duration,
    mut rng: Rng,
) -> Result<String, String> {
    let x = db_name(target);
    let others: Vec<usize> = (0..DATABASES).filter(|&d| d != target).collect();
    let z = db_name(others[rng.below(others.len())]);
    let mut pair = match rng.below(3) {
        0 => [["remove", x.as_str()], ["remove", &z]],
        1 => [["remove", &x], ["remove", &x]],
        _ => [["remove", &x], ["add", &x]],
    };
    rng.shuffle(&mut pair);
    let config = &ctx.servers[0].config;
    let at = ctx.now();
    let runs = run_together(
        pair.iter()
            .map(|args| DbSpec::new(config, args, KillAt::Never))
            .collect(),
    )
    .await?;
    let race = RaceRun {
        at,
        commands: [runs[0].command.clone(), runs[1].command.clone()],
        ended: [Ended::of(&runs[0]), Ended::of(&runs[1])],
    };
    let note = format!(
        "`{}` {} ({}); `{}` {} ({})",
        runs[0].command.trim_start_matches("segmint "),
        race.ended[0].describe(),
        runs[0].ending(),
        runs[1].command.trim_start_matches("segmint "),
        race.ended[1].describe(),
        runs[1].ending()
    );
    ctx.layout_log.lock().unwrap().races.push(race);
    tokio::time::sleep(hold).await;
    Ok(format!("{note}; {}", restored(ctx).await?))
}

/// Kills (SIGKILL) `db remove` of `target` from the configured layout, or `db add` of
/// it once it was taken out, after a random delay or a random number of lines of its
/// change. If that left the change under way, `db remove` of `target` with a
/// configuration without it must be refused (see [`run_missing`]). After `hold`, runs
/// the same command or the opposite one to completion (it first waits for the killed
/// one's silence on its own), then restores the layout. A `db remove` of a database
/// that neither the layout in force nor a change under way names is not run: it would
/// be refused for good (the killed command had not claimed its change, or had
/// finished it).
pub(crate) async fn layout_kill(
    ctx: &Ctx,
    target: usize,
    hold: Duration,
    mut rng: Rng,
) -> Result<String, String> {
    let x = db_name(target);
    let adding = rng.below(2) == 1;
    let same = rng.below(2) == 0;
    let (kill, point) = if rng.below(2) == 0 {
        let after = rng.millis(50, 1500);
        (
            KillAt::After(after),
            format!("after {:.2} s", after.as_secs_f64()),
        )
    } else {
        let n = rng.between(1, 5) as usize;
        (
            KillAt::Lines(n),
            format!(
                "after {n} line{} of its change",
                if n == 1 { "" } else { "s" }
            ),
        )
    };
    let mut note = Vec::new();
    if adding {
        let first = db_command(ctx, &["remove", &x]).await?;
        note.push(format!("`db remove {x}` first{}", first.runs()));
    }
    let verb = if adding { "add" } else { "remove" };
    let at = ctx.now();
    let run = run_one(DbSpec::new(&ctx.servers[0].config, &[verb, &x], kill)).await?;
    note.push(format!(
        "`db {verb} {x}` to be killed {point}: {} (last line: \"{}\")",
        run.ending(),
        short(run.last_line().unwrap_or_default(), 120)
    ));
    let listed = list(ctx).await?;
    let cut_off = listed.pending.is_some();
    note.push(match &listed.pending {
        Some(p) => short(p, 120),
        None => "no change under way".into(),
    });
    if cut_off {
        // The change left under way needs `target` (a member of the layout in force or
        // of the change): run without it, `db remove` must not finish or supersede it.
        note.push(run_missing(ctx, target, &[["remove", &x]], false).await?);
    }
    tokio::time::sleep(hold).await;
    let again = if same == adding { "add" } else { "remove" };
    let mut record = KillRun {
        at,
        command: run.command.clone(),
        point,
        ended_first: !run.killed,
        cut_off,
        rerun: None,
        waited: false,
    };
    if again == "add" || listed.names(target) {
        let began = Instant::now();
        let ran = db_command(ctx, &[again, &x]).await?;
        record.rerun = Some((format!("segmint db {again} {x}"), same));
        record.waited = ran.printed.contains("waiting");
        let did = ran
            .out
            .lines()
            .find(|l| {
                l.starts_with("finishing")
                    || l.starts_with("superseding")
                    || l.starts_with(FINISHED_EARLIER)
            })
            .map_or_else(|| Ended::of_output(&ran.out).describe(), str::to_string);
        note.push(format!(
            "then `db {again} {x}` ({}), {} in {:.2} s{}: {}",
            if same { "the same" } else { "the opposite" },
            if record.waited {
                "waited for silence, done"
            } else {
                "done"
            },
            began.elapsed().as_secs_f64(),
            ran.runs(),
            short(&did, 120)
        ));
    } else {
        note.push(format!(
            "nothing to run again: `db {again} {x}` would be refused, {x} being out already"
        ));
    }
    ctx.layout_log.lock().unwrap().kills.push(record);
    note.push(restored(ctx).await?);
    Ok(note.join("; "))
}
