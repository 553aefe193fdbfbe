//! `segmint import tinyid|leaf`: exports as `mysql --batch` writes them, imported into
//! real databases, then IDs issued by a server above everything the old system issued.

use crate::by_kind;
use crate::common;

use std::io::Write;

use common::cli::{CliRun, config_file, segmint_cli, segmint_ok};
use common::*;

/// `mysql --batch -e 'SELECT * FROM tiny_id_info'` of a Tinyid database: every column,
/// `NULL` for a null.
const TINYID: &str =
    "id\tbiz_type\tbegin_id\tmax_id\tstep\tdelta\tremainder\tcreate_time\tupdate_time\tversion
1\torder\t1\t2001\t1000\t1\t0\t2017-11-19 00:00:00\t2017-11-20 10:00:00\t3
2\todd\t1\t5001\t2000\t2\t1\t2017-11-19 00:00:00\tNULL\t3
";

/// `mysql --batch -e 'SELECT * FROM leaf_alloc'` of Leaf's table (its README's sample
/// row, and one description with a tab and a backslash, escaped as mysql escapes them).
const LEAF: &str = "biz_tag\tmax_id\tstep\tdescription\tupdate_time
leaf-segment-test\t1\t2000\tTest leaf Segment Mode Get Id\t2019-01-01 12:00:00
invoice\t73000\t1000\tinvoices\\tEU \\\\ UK\t2019-01-01 12:00:00
";

/// Runs `segmint import SOURCE FILE [--dry-run]` with `text` as the file.
fn import(cfg: &tempfile::NamedTempFile, source: &str, text: &str, dry_run: bool) -> CliRun {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let path = file.path().to_str().unwrap();
    let mut args = vec!["import", source, path];
    if dry_run {
        args.push("--dry-run");
    }
    segmint_cli(cfg.path(), &args, &[])
}

async fn tinyid_import_issues_above_the_old_max_id(kind: Kind) {
    let dbs = Databases::start(kind, 1);
    let cfg = config_file(&config_toml_urls(&dbs.urls(), ""));
    segmint_ok(cfg.path(), &["migrate"], &[]);

    let dry = import(&cfg, "tinyid", TINYID, true);
    assert!(dry.ok(), "{dry:?}");
    assert!(
        dry.stdout.contains("biz `order`: would be created")
            && dry.stdout.contains("dry run: nothing changed"),
        "{}",
        dry.stdout
    );
    assert_eq!(dbs.row(0, "order"), "", "a dry run writes nothing");

    let run = import(&cfg, "tinyid", TINYID, false);
    assert!(run.ok(), "{run:?}");
    assert!(
        run.stdout
            .contains("biz `order`: created: IDs ≡ 0 mod 1 above 2001, step 1000")
            && run
                .stdout
                .contains("biz `odd`: created: IDs ≡ 1 mod 2 above 5001, step 2000"),
        "{}",
        run.stdout
    );
    assert_eq!(dbs.row(0, "order"), "2001|0|1000|1|0");
    assert_eq!(dbs.row(0, "odd"), "5001|0|2000|2|1", "odd stays odd");

    let again = import(&cfg, "tinyid", TINYID, false);
    assert!(again.ok(), "{again:?}");
    assert!(
        again
            .stdout
            .contains("biz `order`: unchanged (max_id 2001)")
            && again.stdout.contains("nothing to change"),
        "{}",
        again.stdout
    );
    assert_eq!(
        dbs.row(0, "order"),
        "2001|0|1000|1|0",
        "the second run changes nothing"
    );

    let config = dbs.config("");
    let order = add_token(&config, "order").await;
    let odd = add_token(&config, "odd").await;
    let app = spawn_app(config).await;
    assert_eq!(app.ids("order", &order, 3).await, [2002, 2003, 2004]);
    let ids = app.ids("odd", &odd, 3).await;
    assert_eq!(ids, [5003, 5005, 5007], "odd IDs above Tinyid's max_id");
    app.stop().await;

    // A migration script run again once segmint has served: the rows are above the
    // file's max_id, issue none of Tinyid's IDs, and are left as they are. (The stopped
    // server may still give its unissued IDs back meanwhile: the row stays above 2004.)
    let again = import(&cfg, "tinyid", TINYID, false);
    assert!(again.ok(), "{again:?}");
    assert!(
        again.stdout.contains("biz `order`: unchanged (max_id ")
            && again
                .stdout
                .contains(", above the file's 2001: it issues none")
            && again.stdout.contains("nothing to change")
            && !again.stdout.contains("refused"),
        "{}",
        again.stdout
    );
    let row = dbs.row(0, "order");
    let max_id: i64 = row.split('|').next().unwrap().parse().unwrap();
    assert!(max_id >= 2004, "a row served since is left: {row}");
}

async fn leaf_import_keeps_the_description(kind: Kind) {
    let dbs = Databases::start(kind, 1);
    let cfg = config_file(&config_toml_urls(&dbs.urls(), ""));
    segmint_ok(cfg.path(), &["migrate"], &[]);
    // A row that exists already, below Leaf's max_id and without a description: the
    // import raises it and gives it Leaf's description.
    segmint_ok(
        cfg.path(),
        &[
            "biz",
            "add",
            "leaf-segment-test",
            "--step",
            "2000",
            "--start",
            "1",
        ],
        &[],
    );

    let dry = import(&cfg, "leaf", LEAF, true);
    assert!(
        dry.stdout.contains("description would be set (was \"\")"),
        "{dry:?}"
    );
    assert_eq!(
        dbs.sql(
            0,
            "SELECT description FROM tiny_id_info WHERE biz_type = 'leaf-segment-test'"
        ),
        "",
        "a dry run changes nothing"
    );
    let run = import(&cfg, "leaf", LEAF, false);
    assert!(run.ok(), "{run:?}");
    assert_eq!(
        dbs.sql(
            0,
            "SELECT description FROM tiny_id_info WHERE biz_type = 'invoice'"
        ),
        "invoices\tEU \\ UK"
    );
    assert_eq!(
        dbs.sql(
            0,
            "SELECT description FROM tiny_id_info WHERE biz_type = 'leaf-segment-test'"
        ),
        "Test leaf Segment Mode Get Id"
    );
    let again = import(&cfg, "leaf", LEAF, false);
    assert!(
        again.ok() && again.stdout.contains("nothing to change"),
        "{again:?}"
    );
    let list = segmint_ok(cfg.path(), &["biz", "list"], &[]);
    assert!(
        list.contains("Test leaf Segment Mode Get Id") && list.contains("invoices\\tEU \\\\ UK"),
        "{list}"
    );
    segmint_ok(
        cfg.path(),
        &[
            "biz",
            "add",
            "noted",
            "--step",
            "10",
            "--description",
            "by hand",
        ],
        &[],
    );
    assert_eq!(
        dbs.sql(
            0,
            "SELECT description FROM tiny_id_info WHERE biz_type = 'noted'"
        ),
        "by hand"
    );

    let config = dbs.config("");
    let token = add_token(&config, "invoice").await;
    let app = spawn_app(config).await;
    // Leaf issued [max_id - step, max_id) from its last segment: 73000 itself never.
    assert_eq!(app.ids("invoice", &token, 2).await, [73001, 73002]);
    app.stop().await;
}

by_kind!(
    tinyid_import_issues_above_the_old_max_id,
    leaf_import_keeps_the_description
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_databases_raise_refuse_and_report_per_database() {
    let dbs = Databases::start(Kind::Postgres, 2);
    let cfg = config_file(&config_toml_urls(&dbs.urls(), ""));
    segmint_ok(cfg.path(), &["migrate"], &[]);
    segmint_ok(cfg.path(), &["biz", "add", "order", "--step", "1000"], &[]);
    segmint_ok(
        cfg.path(),
        &["biz", "add", "even", "--step", "1000", "--even"],
        &[],
    );
    segmint_ok(cfg.path(), &["biz", "add", "ahead", "--step", "1000"], &[]);
    dbs.sql(
        1,
        "UPDATE tiny_id_info SET max_id = 9000 WHERE biz_type = 'ahead'",
    );

    // Tinyid with two databases: each biz's rows in both, delta 2.
    let export = "biz_type\tmax_id\tstep\tdelta\tremainder
order\t4000\t1000\t2\t0
order\t4400\t1000\t2\t1
even\t100\t1000\t1\t0
ahead\t5000\t1000\t1\t0
fresh\t7000\t100\t2\t1
huge\t9223372036854775000\t1000\t1\t0
";
    let run = import(&cfg, "tinyid", export, false);
    assert!(!run.ok(), "a refusal fails the command: {run:?}");
    let out = &run.stdout;
    for line in [
        "\"pg0\": biz `order`: raised: max_id 0 to 4400",
        "\"pg1\": biz `order`: raised: max_id 0 to 4400",
        "\"pg0\": biz `even`: refused: its row has IDs ≡ 0 mod 4, the import needs 0 mod 2",
        "\"pg1\": biz `ahead`: unchanged (max_id 9000, above the file's 5000: it issues none of the IDs the file's system issued)",
        "\"pg0\": biz `ahead`: raised: max_id 0 to 5000",
        "\"pg0\": biz `fresh`: created: IDs ≡ 1 mod 4 above 7000, step 100",
        "\"pg1\": biz `fresh`: created: IDs ≡ 3 mod 4 above 7000, step 100",
        "\"pg0\": biz `huge`: refused: max_id 9223372036854775000 + step 1000 exceeds",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(
        run.stderr.contains("refused 2 biz(s): even, huge")
            && run.stdout.contains("imported, but for the bizs refused")
            && !run.stdout.contains("nothing to change"),
        "{}",
        run.stderr
    );
    assert_eq!(dbs.row(0, "order"), "4400|1|1000|2|0");
    assert_eq!(dbs.row(1, "order"), "4400|1|1000|2|1");
    assert_eq!(
        dbs.row(0, "even"),
        "0|0|1000|4|0",
        "a refused biz is left alone"
    );
    assert_eq!(dbs.row(0, "ahead"), "5000|1|1000|2|0");
    assert_eq!(
        dbs.row(1, "ahead"),
        "9000|0|1000|2|1",
        "a row above the file is left"
    );

    let again = import(&cfg, "tinyid", export, false);
    assert!(
        again
            .stdout
            .contains("\"pg1\": biz `order`: unchanged (max_id 4400)"),
        "{}",
        again.stdout
    );
    assert_eq!(
        dbs.row(0, "order"),
        "4400|1|1000|2|0",
        "the second run changes nothing"
    );

    let config = dbs.config("");
    let order = add_token(&config, "order").await;
    let fresh = add_token(&config, "fresh").await;
    let app = spawn_app(config).await;
    let ids = app.ids("order", &order, 50).await;
    assert!(ids.iter().all(|&id| id > 4400), "{ids:?}");
    let ids = app.ids("fresh", &fresh, 50).await;
    assert!(ids.iter().all(|&id| id > 7000 && id % 2 == 1), "{ids:?}");
    app.stop().await;
}

#[test]
fn a_malformed_file_changes_nothing() {
    let dbs = Databases::start(Kind::Postgres, 1);
    let cfg = config_file(&config_toml_urls(&dbs.urls(), ""));
    segmint_ok(cfg.path(), &["migrate"], &[]);
    let export = "biz_tag\tmax_id\tstep\tdescription
first\t100\t10\tfine
second\t1e6\t10\tnot a number
";
    let run = import(&cfg, "leaf", export, false);
    assert!(!run.ok());
    assert!(
        run.stderr
            .contains("line 3, column 2 (max_id): `1e6` is not a whole number")
            && run.stderr.contains("nothing changed"),
        "{}",
        run.stderr
    );
    assert_eq!(dbs.row(0, "first"), "", "no row of the file is written");
    let run = import(&cfg, "tinyid", "biz_type\tmax_id\tstep\nx\t1\t1\n", false);
    assert!(
        run.stderr
            .contains("line 1: the header lacks column `delta`"),
        "{}",
        run.stderr
    );
}
