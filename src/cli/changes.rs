//! `segmint db add`, `db remove` and `migrate`: the commands that change the
//! databases' schema or layout, printing each step as it goes, or under `--json` one
//! document at the end (see [`reports`](super::reports)).

use segmint::config::Config;
use segmint::layout::{Layout, LayoutChange, LayoutState, Member};
use segmint::store::{OpenMode, Reason, Refusal, Store, StoreError};

use super::{DbCommand, Result, reports};

/// `segmint db add` / `db remove`: moves the cluster to the layout with (or without)
/// the database, printing each step as it goes (under `--json`, one document at the
/// end).
pub async fn change_layout(config: Config, change: DbCommand, out: reports::Output) -> Result {
    let before = configured_layout(&config);
    let (config, adding) = with_added_database(config, &change)?;
    let (intent, kind, name) = match &change {
        DbCommand::Add { name, .. } => (LayoutChange::Add(name.clone()), "add", name),
        DbCommand::Remove { name, lost: false } => {
            (LayoutChange::Remove(name.clone()), "remove", name)
        }
        DbCommand::Remove { name, lost: true } => (LayoutChange::Lost(name.clone()), "lost", name),
        _ => return Ok(()),
    };
    let store = Store::open_for_commands(&config, OpenMode::Create)?;
    let migrated = match &adding {
        Some(name) => migrate_before_adding(&store, &intent, &before, name, out).await?,
        None => Vec::new(),
    };
    let mut steps = Vec::new();
    let mut say = |line: String| {
        if !out.json {
            println!("{line}");
        }
        steps.push(line);
    };
    let done = store
        .cluster()
        .change_layout(&intent, &before, &mut say)
        .await?;
    let report = reports::LayoutChanged {
        change: kind,
        database: name.clone(),
        migrated,
        steps,
        layout: super::lists::layout_json(&done),
    };
    out.emit(&report, |r| layout_changed_lines(&done, r))
}

/// The layout of the databases as `config` names them, with their classes: what the
/// change starts from when no layout is stored yet.
fn configured_layout(config: &Config) -> Layout {
    Layout {
        epoch: 0,
        members: config
            .databases
            .iter()
            .map(|d| Member {
                name: d.name.clone(),
                class: d.residue,
            })
            .collect(),
        state: LayoutState::Done,
        lost: Vec::new(),
    }
}

/// The configuration to run `change` with, and the name of the database it adds, if
/// any: under `db add`, `config` with the database of the URL given when it does not
/// name it already. Refused when the configuration does not name the database and
/// no URL is given.
fn with_added_database(config: Config, change: &DbCommand) -> Result<(Config, Option<String>)> {
    match change {
        DbCommand::Add { name, url } => {
            let configured = config.databases.iter().any(|d| d.name == *name);
            let config = match (configured, url) {
                (true, _) => config,
                (false, Some(url)) => config.with_database(name, url)?,
                (false, None) => {
                    return Err(StoreError::from(
                        Refusal::new(
                            Reason::DatabaseUnknown,
                            format!("database \"{name}\" is not configured; nothing changed"),
                        )
                        .hint(format!("give its URL (`segmint db add {name} URL`)")),
                    )
                    .into());
                }
            };
            Ok((config, Some(name.clone())))
        }
        _ => Ok((config, None)),
    }
}

/// Before `db add` of the database `name` changes the layout: checks what the change
/// `intent` from `before` checks before writing anything, then brings the schema of
/// every database up to date, printing each one migrated (unless under `--json`).
/// Returns the databases migrated, or the new database's failure, with nothing changed.
async fn migrate_before_adding(
    store: &Store,
    intent: &LayoutChange,
    before: &Layout,
    name: &str,
    out: reports::Output,
) -> Result<Vec<reports::MigratedDatabase>> {
    // What the change checks before writing anything is checked before the new
    // database is touched: a database missing from the configuration or not
    // answering (the new one included) is named, and nothing changes.
    store
        .cluster()
        .check_layout_change(intent, before, name)
        .await?;
    // The new database gets the schema first; the others have it, or get what is
    // pending, as `segmint migrate` would. One that does not answer is left to the
    // change, which refuses if it needs it.
    let mut migrated = Vec::new();
    for (db, result) in store.cluster().migrate_schema().await {
        match result {
            Ok(applied) if applied.is_empty() => {}
            Err(e) if db == *name => {
                return Err(format!("\"{db}\": migration failed: {e}; nothing changed").into());
            }
            result => {
                let line = match &result {
                    Ok(applied) => format!("\"{db}\": applied {}", applied.join(", ")),
                    Err(e) => format!("\"{db}\": not migrated ({e})"),
                };
                if !out.json {
                    println!("{line}");
                }
                migrated.push(reports::MigratedDatabase {
                    name: db,
                    error: result.as_ref().err().map(ToString::to_string),
                    applied: result.unwrap_or_default(),
                });
            }
        }
    }
    Ok(migrated)
}

/// The text after a layout change `r` whose layout in force is now `done`: the
/// databases and classes every server can name, then what servers do next.
fn layout_changed_lines(done: &Layout, r: &reports::LayoutChanged) -> Vec<String> {
    let mut lines = vec![
        String::new(),
        "Every server can name these databases in its configuration, with these classes (servers follow the stored layout whatever their configuration says):".to_string(),
    ];
    lines.extend(done.members.iter().map(|m| {
        format!(
            "  name = \"{}\"  delta = {}  remainder = {}",
            m.name,
            m.class.delta(),
            m.class.remainder()
        )
    }));
    let name = &r.database;
    lines.push(match r.change {
        "add" => format!(
            "Servers use \"{name}\" once their configuration names it: add it and restart them one at a time; until then they serve from the others."
        ),
        "remove" => format!(
            "Servers stopped using \"{name}\" at their next catalog refresh; take it out of their configuration at leisure."
        ),
        _ => format!(
            "\"{name}\" is lost for good: servers that read any other database never use it again, and its classes and worker IDs are never given to another database. Take it out of every server's configuration, and wipe its data before the machine is reused: a server that could reach only it would not know it was lost."
        ),
    });
    lines
}

pub async fn migrate(store: &Store, out: reports::Output) -> Result {
    let migration = store.cluster().migrate().await;
    let (membership, refused) = match migration.membership {
        Ok(recorded) => (
            Some(reports::MembershipRecorded {
                now: recorded.is_some(),
                layout: recorded.as_ref().map(super::lists::layout_json),
                members: recorded.as_ref().map(|l| l.describe()).unwrap_or_default(),
            }),
            None,
        ),
        Err(e) => (None, Some(e)),
    };
    let report = reports::Migrated {
        databases: migration
            .databases
            .into_iter()
            .map(|(name, result)| reports::MigratedDatabase {
                name,
                error: result.as_ref().err().map(ToString::to_string),
                applied: result.unwrap_or_default(),
            })
            .collect(),
        membership,
    };
    out.emit(&report, reports::Migrated::lines)?;
    match (report.failed(), refused) {
        (0, None) => Ok(()),
        (0, Some(e)) => Err(e.into()),
        (failed, _) => Err(format!("migration failed on {failed} database(s)").into()),
    }
}
