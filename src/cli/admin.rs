//! The admin commands (everything but `serve`): each family parsed by clap in
//! `main.rs`, carried out here on a store opened for commands, its report written by
//! [`reports`].

use segmint::biz::BizTag;
use segmint::config::Config;
use segmint::import::Source;
use segmint::segment::Residue;
use segmint::store::{OpenMode, Reason, Refusal, Store, StoreError};

use super::{
    AdminCommand, BizAdd, BizCommand, DbCommand, IdCommand, ImportCommand, Result, TokenCommand,
    changes, lists, reports,
};

/// Runs `command` on a runtime of its own.
pub fn run(config: Config, command: AdminCommand, out: reports::Output) -> Result {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let AdminCommand::Db(change @ (DbCommand::Add { .. } | DbCommand::Remove { .. })) = command {
        return runtime.block_on(changes::change_layout(config, change, out));
    }
    runtime.block_on(async move {
        // Only `migrate` initialises a store: the other commands on a missing embedded
        // file would create a new, empty store where the real one was expected.
        let mode = match command {
            AdminCommand::Migrate => OpenMode::Create,
            _ => OpenMode::Existing,
        };
        let store = Store::open_for_commands(&config, mode)?;
        match command {
            AdminCommand::Migrate => changes::migrate(&store, out).await,
            AdminCommand::Biz(command) => biz(&store, command, out).await,
            AdminCommand::Token(command) => token(&store, &config, command, out).await,
            AdminCommand::Import(ImportCommand::Tinyid(file)) => {
                lists::import(&store, Source::Tinyid, &file, out.json).await
            }
            AdminCommand::Import(ImportCommand::Leaf(file)) => {
                lists::import(&store, Source::Leaf, &file, out.json).await
            }
            AdminCommand::Id(IdCommand::Decode { biz, id }) => {
                let biz = BizTag::parse(&biz).map_err(StoreError::from)?;
                let decoded = store.decode_id(&biz, &id).await?;
                out.emit(&reports::decoded_json(&decoded), |_| {
                    vec![decoded.to_string()]
                })
            }
            AdminCommand::Db(command) => db(&store, command, out).await,
        }
    })
}

/// `segmint biz …`.
async fn biz(store: &Store, command: BizCommand, out: reports::Output) -> Result {
    match command {
        BizCommand::Add(add) => biz_add(store, add, out).await,
        BizCommand::List => lists::list_bizs(store, out.json).await,
        BizCommand::Recover { name, above } => {
            let biz = BizTag::parse(&name).map_err(StoreError::from)?;
            let above = match above {
                Some(id) => Some(store.decode_id(&biz, &id).await?.number),
                None => None,
            };
            let notes = store.recover_period(&biz, above).await?;
            let report = reports::Changed {
                command: "biz recover",
                target: name,
                notes,
            };
            out.emit(&report, |r| r.notes.clone())
        }
    }
}

/// `segmint biz add`.
async fn biz_add(store: &Store, add: Box<BizAdd>, out: reports::Output) -> Result {
    let within = match (add.odd, add.even) {
        (true, _) => Some(Residue::new(2, 1)?),
        (_, true) => Some(Residue::new(2, 0)?),
        _ => None,
    };
    let biz = BizTag::parse(&add.name).map_err(StoreError::from)?;
    let shape = add.shape().map_err(|e| {
        StoreError::from(Refusal::new(
            Reason::InvalidShape,
            format!("{e}; nothing changed"),
        ))
    })?;
    let notes = store
        .cluster()
        .add_shaped_biz(
            &biz,
            add.step,
            add.start,
            within,
            &add.description,
            shape.clone(),
        )
        .await?;
    let report = reports::BizAdded::new(
        biz.as_str(),
        (add.step, add.start),
        within,
        &add.description,
        shape.as_ref(),
        notes,
    );
    out.emit(&report, |r| r.notes.clone())
}

/// `segmint token …`. The steps go to stderr and the token alone to stdout:
/// `$(segmint token add …)`.
async fn token(
    store: &Store,
    config: &Config,
    command: TokenCommand,
    out: reports::Output,
) -> Result {
    let token_alone = |r: &reports::TokenIssued| {
        r.notes.iter().for_each(|line| eprintln!("{line}"));
        vec![r.token.clone()]
    };
    match command {
        TokenCommand::Add {
            biz,
            remark,
            expires_in,
        } => {
            let tags = biz
                .iter()
                .map(|b| BizTag::parse(b))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(StoreError::from)?;
            // A biz of snowflake IDs alone needs no row, only a token.
            let needs_row = |tag: &BizTag| !config.snowflake.bizs.contains(tag);
            let (token, notes) = store
                .add_token_for(&tags, &remark, expires_in, needs_row)
                .await?;
            let mut bizs: Vec<String> = Vec::with_capacity(biz.len());
            for b in biz {
                if !bizs.contains(&b) {
                    bizs.push(b);
                }
            }
            let report = reports::TokenIssued {
                token,
                biz: (bizs.len() == 1).then(|| bizs[0].clone()),
                bizs,
                rotated: None,
                expires_in_seconds: expires_in.map(|d| d.as_secs()),
                grace_seconds: None,
                failed: Vec::new(),
                notes,
            };
            out.emit(&report, token_alone)
        }
        TokenCommand::Revoke { prefix } => {
            let notes = store.revoke_token(&prefix).await?;
            let report = reports::Changed {
                command: "token revoke",
                target: prefix,
                notes,
            };
            out.emit(&report, |r| r.notes.clone())
        }
        TokenCommand::Rotate {
            prefix,
            grace,
            expires_in,
        } => {
            let rotation = store.rotate_token(&prefix, grace, expires_in).await?;
            let report = reports::TokenIssued {
                token: rotation.token,
                biz: None,
                bizs: rotation.bizs,
                rotated: Some(prefix),
                expires_in_seconds: expires_in.map(|d| d.as_secs()),
                grace_seconds: Some(grace.as_secs()),
                failed: rotation.failed,
                notes: rotation.report,
            };
            out.emit(&report, token_alone)?;
            rotated_everywhere(&report.failed)
        }
        TokenCommand::List => lists::list_tokens(store, out.json).await,
    }
}

/// A rotation whose old token's expiry could not be lowered on `failed` databases: an
/// error naming them, after the new token was written out.
fn rotated_everywhere(failed: &[String]) -> Result {
    match failed.is_empty() {
        true => Ok(()),
        false => Err(StoreError::from(
            Refusal::new(
                Reason::WriteFailed,
                format!(
                    "the new token works, but the old one keeps working on {} until its expiry is lowered there",
                    failed.join(", ")
                ),
            )
            .hint("run `segmint token rotate` again with the old prefix"),
        )
        .into()),
    }
}

/// `segmint db list` and `db fence` (`db add` and `db remove` run before a store is
/// opened: [`changes::change_layout`]).
async fn db(store: &Store, command: DbCommand, out: reports::Output) -> Result {
    match command {
        DbCommand::Add { .. } | DbCommand::Remove { .. } => Ok(()),
        DbCommand::List => lists::list_layout(store, out.json).await,
        DbCommand::Fence { name, above } => {
            let notes = store.cluster().raise_database(&name, above).await?;
            let report = reports::Changed {
                command: "db fence",
                target: name,
                notes,
            };
            out.emit(&report, |r| r.notes.clone())
        }
    }
}
