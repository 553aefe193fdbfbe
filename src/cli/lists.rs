//! What `segmint db list`, `biz list`, `token list` and `import` print: a table for
//! people, or with `--json` one JSON document on stdout for scripts (the same facts,
//! with every time in Unix seconds and every class as `delta`/`remainder`). Either way
//! a database that could not be read is named (on stderr, and in the document's
//! `unreachable`) and the command exits non-zero.

use std::time::{Duration, UNIX_EPOCH};

use segmint::import::Source;
use segmint::layout::{Layout, Member, Standing};
use segmint::segment::Residue;
use segmint::store::{HASH_PREFIX, Reason, Refusal, Store, StoreError};
use serde_json::{Value, json};

use super::{ImportFile, Result};

/// Prints `doc` as pretty JSON on stdout.
fn print_json(doc: &Value) -> Result {
    println!("{}", serde_json::to_string_pretty(doc)?);
    Ok(())
}

/// The error a listing ends with when `n` databases could not be read.
fn unreadable(n: usize) -> Result {
    match n {
        0 => Ok(()),
        n => Err(format!("{n} database(s) could not be read").into()),
    }
}

pub fn class_json(class: Residue) -> Value {
    json!({ "delta": class.delta(), "remainder": class.remainder() })
}

fn members_json(members: &[Member]) -> Value {
    members
        .iter()
        .map(|m| json!({ "name": m.name, "class": class_json(m.class) }))
        .collect()
}

pub fn layout_json(l: &Layout) -> Value {
    json!({
        "epoch": l.epoch,
        "members": members_json(&l.members),
        "lost": members_json(&l.lost),
    })
}

/// A database's state in `db list`.
fn standing(error: bool, class: Option<Residue>, standing: &Standing) -> &'static str {
    match (error, class, standing) {
        (true, ..) => "unreachable",
        (false, Some(_), _) => "in layout",
        (false, None, Standing::Lost { .. }) => "lost",
        (false, None, Standing::Behind { .. }) => "layout behind",
        (false, None, Standing::Disagrees) => "disagrees",
        (false, None, Standing::Current) => "not in layout",
    }
}

pub async fn list_layout(store: &Store, as_json: bool) -> Result {
    let report = store.cluster().layout_report().await;
    let unreachable = report
        .databases
        .iter()
        .filter(|d| d.error.is_some())
        .count();
    for d in &report.databases {
        if let Some(e) = &d.error {
            eprintln!("\"{}\": {e}", d.name);
        }
    }
    if as_json {
        let databases: Vec<Value> = report
            .databases
            .iter()
            .map(|d| {
                json!({
                    "name": d.name,
                    "class": d.class.map(class_json),
                    "state": standing(d.error.is_some(), d.class, &d.standing),
                    "rows": d.rows,
                    "frozen": d.frozen,
                    "epoch": d.epoch,
                    "error": d.error,
                })
            })
            .collect();
        print_json(&json!({
            "layout": report.current.as_ref().map(layout_json),
            "pending": report.pending.as_ref().map(layout_json),
            "databases": databases,
        }))?;
        return unreadable(unreachable);
    }
    match &report.current {
        Some(l) => println!("layout epoch {} (done): {}", l.epoch, l.describe()),
        None => println!(
            "no layout recorded: servers use no database until `segmint migrate` records the membership"
        ),
    }
    if let Some(l) = report.current.as_ref().filter(|l| !l.lost.is_empty()) {
        let lost: Vec<String> = l
            .lost
            .iter()
            .map(|m| format!("{} ({})", m.name, m.class))
            .collect();
        println!(
            "declared lost (their classes are never given again): {}",
            lost.join(", ")
        );
    }
    match &report.pending {
        Some(l) => println!(
            "change under way to epoch {}: {} (cut off? run the same command again to finish it, or the opposite one to roll it back)",
            l.epoch,
            l.describe()
        ),
        None => println!("no change under way"),
    }
    println!(
        "{:<16} {:<12} {:<14} {:>6} {:>7} {:>6}",
        "DATABASE", "CLASS", "STATE", "ROWS", "FROZEN", "EPOCH"
    );
    for d in &report.databases {
        println!(
            "{:<16} {:<12} {:<14} {:>6} {:>7} {:>6}",
            d.name,
            d.class.map_or_else(|| "-".into(), |c| c.to_string()),
            standing(d.error.is_some(), d.class, &d.standing),
            d.rows,
            d.frozen,
            d.epoch
        );
    }
    unreadable(unreachable)
}

pub async fn import(store: &Store, source: Source, file: &ImportFile, json: bool) -> Result {
    let path = file.file.display();
    let text =
        std::fs::read_to_string(&file.file).map_err(|e| format!("cannot read {path}: {e}"))?;
    let imports = segmint::import::parse(source, &text)
        .map_err(|e| format!("{path}: {e}; nothing changed"))?;
    let report = store.cluster().import(&imports, file.dry_run).await?;
    let done = match (file.dry_run, report.changes, report.refused.is_empty()) {
        (true, ..) => "dry run: nothing changed",
        (false, 0, true) => "nothing to change: every biz is imported already",
        (false, 0, false) => "nothing changed",
        (false, _, true) => "imported",
        (false, _, false) => "imported, but for the bizs refused",
    };
    if json {
        print_json(&json!({
            "file": path.to_string(),
            "dry_run": file.dry_run,
            "bizs": imports.len(),
            "changes": report.changes,
            "refused": report.refused,
            "lines": report.lines,
        }))?;
    } else {
        for line in &report.lines {
            println!("{line}");
        }
        println!("{} biz(s) in {path}: {done}", imports.len());
    }
    match report.refused.is_empty() {
        true => Ok(()),
        false => Err(StoreError::from(
            Refusal::new(
                Reason::ImportConflict,
                format!(
                    "refused {} biz(s): {}; the others were imported",
                    report.refused.len(),
                    report.refused.join(", ")
                ),
            )
            .hint("each `refused:` line says why, per database; once the row or the file is corrected, run the import again: it leaves what was imported as it is"),
        )
        .into()),
    }
}

pub async fn list_bizs(store: &Store, as_json: bool) -> Result {
    let mut rows = Vec::new();
    let mut unreachable = Vec::new();
    for (db, result) in store.cluster().list_bizs().await {
        match result {
            Ok(r) => rows.extend(r.into_iter().map(|r| (db.clone(), r))),
            Err(e) => {
                eprintln!("\"{db}\": unreachable: {e}");
                unreachable.push(json!({ "database": db, "error": e.to_string() }));
            }
        }
    }
    if as_json {
        let bizs: Vec<Value> = rows
            .iter()
            .map(|(db, r)| {
                json!({
                    "database": db,
                    "biz": r.biz_type,
                    "max_id": r.max_id,
                    "step": r.step,
                    "delta": r.delta,
                    "remainder": r.remainder,
                    "version": r.version,
                    "epoch": r.epoch,
                    "frozen": r.frozen,
                    "description": r.description,
                })
            })
            .collect();
        print_json(&json!({ "bizs": bizs, "unreachable": unreachable }))?;
        return unreadable(unreachable.len());
    }
    println!(
        "{:<16} {:<24} {:>20} {:>12} {:>8} {:>9} {:>10} {:>6} {:<6} DESCRIPTION",
        "DATABASE", "BIZ", "MAX_ID", "STEP", "DELTA", "REMAINDER", "VERSION", "EPOCH", "STATE"
    );
    for (db, r) in &rows {
        println!(
            "{:<16} {:<24} {:>20} {:>12} {:>8} {:>9} {:>10} {:>6} {:<6} {}",
            db,
            r.biz_type,
            r.max_id,
            r.step,
            r.delta,
            r.remainder,
            r.version,
            r.epoch,
            if r.frozen { "frozen" } else { "live" },
            one_line(&r.description)
        );
    }
    unreadable(unreachable.len())
}

/// `text` on one line of a table: tabs, line breaks and backslashes escaped as
/// `mysql --batch` escapes them.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

pub async fn list_tokens(store: &Store, as_json: bool) -> Result {
    let list = store.list_tokens().await;
    let now = store.unix_now();
    let names = store.database_names();
    for (db, e) in &list.unreachable {
        eprintln!("\"{db}\": unreachable: {e}");
    }
    let prefix = |hash: &str| hash.get(..HASH_PREFIX).unwrap_or(hash).to_owned();
    if as_json {
        let tokens: Vec<Value> = list
            .tokens
            .iter()
            .map(|t| {
                let dbs: Vec<&str> = t.databases.iter().map(|&i| names[i].as_str()).collect();
                json!({
                    "token_sha256": prefix(&t.hash),
                    "bizs": t.bizs,
                    "state": t.state(now).to_string(),
                    "created": t.created,
                    "expires": t.expires,
                    "revoked": t.revoked,
                    "last_used": t.last_used,
                    "databases": dbs,
                    "remark": t.remark,
                })
            })
            .collect();
        let unreachable: Vec<Value> = list
            .unreachable
            .iter()
            .map(|(db, e)| json!({ "database": db, "error": e.to_string() }))
            .collect();
        print_json(&json!({ "tokens": tokens, "unreachable": unreachable }))?;
        return unreadable(list.unreachable.len());
    }
    let time = |t: Option<i64>| match t.and_then(|t| u64::try_from(t).ok()) {
        Some(t) => {
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(t)).to_string()
        }
        None => "-".into(),
    };
    println!(
        "{:<17} {:<24} {:<8} {:<20} {:<20} {:<20} {:<16} REMARK",
        "TOKEN_SHA256", "BIZ", "STATE", "CREATED", "EXPIRES", "LAST_USED(~)", "DATABASES"
    );
    for t in &list.tokens {
        let bizs: Vec<&str> = t.bizs.iter().map(String::as_str).collect();
        let dbs: Vec<&str> = t.databases.iter().map(|&i| names[i].as_str()).collect();
        println!(
            "{:<17} {:<24} {:<8} {:<20} {:<20} {:<20} {:<16} {}",
            prefix(&t.hash),
            bizs.join(","),
            t.state(now),
            time(Some(t.created)),
            time(t.expires),
            time(t.last_used),
            dbs.join(","),
            t.remark
        );
    }
    unreadable(list.unreachable.len())
}
