//! Growing and shrinking the cluster online (`segmint db add` / `db remove`), against
//! real PostgreSQL servers and real server processes under steady traffic: no
//! duplicate, every ID in its class, requests answered throughout; a change cut off
//! (the command killed, a database stopped) is safe to serve from and finished by
//! running it again or rolled back by the opposite one; a class changed by hand without
//! a fence is refused.

use crate::common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cli::config_file;
use common::http::{Remote, get, metric, try_v1_ids, v1_ids};
use common::layout::{
    Cluster, SILENT, assert_consistent, bulk_bizs, cli_ok, highest_max_id, kill_midway, live_rows,
    toml_for,
};
use common::traffic::{Traffic, check_streams};
use common::wait::until_catalog_read;
use common::*;

/// The servers under test: fixed ports, restarted one at a time with a new
/// configuration.
struct Servers {
    ports: Vec<u16>,
    procs: Vec<Option<ServerProcess>>,
}

impl Servers {
    async fn start(n: usize, toml: &str) -> Servers {
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut procs = Vec::new();
        for &port in &ports {
            procs.push(Some(ServerProcess::start_on(toml, port, &[]).await));
        }
        Servers { ports, procs }
    }

    fn bases(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// Restarts each server in turn with `toml` (a graceful stop, then a start on the
    /// same port), the next one only once the restarted one has read its catalog: the
    /// others serve meanwhile.
    async fn rolling_restart(&mut self, toml: &str) {
        for k in 0..self.ports.len() {
            if let Some(mut old) = self.procs[k].take() {
                old.terminate_within(Duration::from_secs(10)).await;
            }
            let new = ServerProcess::start_on(toml, self.ports[k], &[]).await;
            // pg0 is a member of every layout these tests configure.
            let remote = new.remote(Duration::from_secs(5));
            until_catalog_read(&remote, "pg0", 0.0, 1, Duration::from_secs(20)).await;
            self.procs[k] = Some(new);
        }
    }
}

/// Three servers under traffic while the cluster goes from 1 to 2 to 3 databases and
/// back to 2, with a plain and an odd-only biz: no duplicate, odd IDs stay odd, the
/// rows end in the new classes above every earlier ID, requests are answered
/// throughout (a restarted server's requests go to the others).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_keep_serving_while_the_cluster_goes_1_2_3_2() {
    let c = Cluster::start(3, 1, "200", true);
    let mut servers = Servers::start(3, &c.toml).await;
    let traffic = Traffic::start(servers.bases(), &c.plain_token, &c.odd_token);
    let (dbs, urls, one) = (c.dbs, c.urls, c.toml);
    // Traffic for a while between the changes, not a condition.
    let pause = || tokio::time::sleep(Duration::from_millis(1500));
    pause().await;

    // 1 → 2.
    let out = cli_ok(&one, &["db", "add", "pg1", &urls[1]]);
    assert!(
        out.contains("layout epoch 1 is done: pg0 (0 mod 2), pg1 (1 mod 2)"),
        "{out}"
    );
    let two = toml_for(&dbs, &[0, 1]);
    servers.rolling_restart(&two).await;
    pause().await;
    // 2 → 3.
    let out = cli_ok(&two, &["db", "add", "pg2", &urls[2]]);
    assert!(out.contains("layout epoch 2 is done"), "{out}");
    let three = toml_for(&dbs, &[0, 1, 2]);
    servers.rolling_restart(&three).await;
    pause().await;
    // Every database now serves: each one's rows moved on since the change.
    let moved_on = |i: usize| -> i64 { dbs.version(i, "plain") };
    let before: Vec<i64> = (0..3).map(moved_on).collect();
    for (i, was) in before.iter().enumerate() {
        eventually(
            Duration::from_secs(20),
            &format!("pg{i} gives out a segment in layout 2"),
            async || match moved_on(i) {
                now if now > *was => Ok(()),
                now => Err(format!("version {now}, {was} before")),
            },
        )
        .await;
    }
    // 3 → 2: pg1 leaves; the servers stop using it without a restart.
    let out = cli_ok(&three, &["db", "remove", "pg1"]);
    assert!(
        out.contains("layout epoch 3 is done: pg0 (0 mod 2), pg2 (1 mod 2)"),
        "{out}"
    );
    let frozen = dbs.row(1, "plain");
    // Under traffic for a while, the removed database's row must not move.
    pause().await;
    assert_eq!(
        dbs.row(1, "plain"),
        frozen,
        "a removed database's row moved on"
    );
    let list = cli_ok(&three, &["db", "list"]);
    assert!(list.contains("layout epoch 3 (done)"), "{list}");
    assert!(list.contains("no change under way"), "{list}");
    assert!(
        list.lines()
            .any(|l| l.starts_with("pg1") && l.contains("not in layout")),
        "{list}"
    );
    // Every server follows epoch 3 and shows pg1 out of the layout, not down.
    for base in servers.bases() {
        let remote = Remote::new(&base, Duration::from_secs(5));
        eventually(
            Duration::from_secs(5),
            "the server follows epoch 3",
            async || {
                let epoch = metric(&remote, "segmint_layout_epoch").await;
                let out = metric(&remote, "segmint_database_in_layout{database=\"pg1\"}").await;
                let up = metric(&remote, "segmint_database_up{database=\"pg1\"}").await;
                match (epoch, out, up) {
                    (3.0, 0.0, 1.0) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        let ready = get(&remote, "/readyz").await.json();
        let pg1 = ready["databases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == "pg1")
            .cloned()
            .unwrap();
        assert_eq!(pg1["in_layout"], false, "{pg1}");
        assert!(pg1["residue"].is_null(), "{pg1}");
    }
    servers.rolling_restart(&toml_for(&dbs, &[0, 2])).await;
    pause().await;
    let streams = traffic.finish().await;
    check_streams(&streams);

    // The rows: the plain biz in 0 and 1 mod 2, the odd one in 1 and 3 mod 4 (still
    // odd), both at epoch 3; pg1's frozen.
    assert_eq!(
        live_rows(&dbs, 3, "plain"),
        vec![(0, 2, 0, 3), (2, 2, 1, 3)]
    );
    assert_eq!(live_rows(&dbs, 3, "odd"), vec![(0, 4, 1, 3), (2, 4, 3, 3)]);
    // Worker IDs followed the layout: the removed database blocks all of its own.
    let blocked = dbs.sql(
        1,
        "SELECT count(*) FROM segmint_worker_lease WHERE holder = 'segmint-layout'",
    );
    assert_eq!(blocked, "1024", "worker IDs left on the removed database");
}

/// Once layouts are stored, a server started after a class was edited by hand (it has
/// no earlier view of the row) refuses it too: the class is not the one the row's
/// layout epoch gives its database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_layouts_are_stored_a_fresh_server_refuses_a_class_edited_by_hand() {
    let Cluster {
        dbs,
        urls,
        toml: one,
        plain_token: token,
        ..
    } = Cluster::start(2, 1, "10", false);
    cli_ok(&one, &["db", "add", "pg1", &urls[1]]);
    let two = toml_for(&dbs, &[0, 1]);
    let server = ServerProcess::start(&two).await;
    let ids = v1_ids(&server.remote(Duration::from_secs(5)), "plain", &token, 10).await;
    assert!(ids.iter().all(|id| *id > 0));
    drop(server);
    // The case, with the servers stopped: even/odd re-classed to 0 and 1 mod 3
    // without raising max_id. The two new classes do not overlap each other, so only
    // the layout says they are wrong.
    for (i, r) in [(0, 0), (1, 1)] {
        dbs.sql(
            i,
            &format!("UPDATE tiny_id_info SET delta = 3, remainder = {r} WHERE biz_type = 'plain'"),
        );
    }
    let fresh = ServerProcess::start(&two).await;
    let e = try_v1_ids(&fresh.remote(Duration::from_secs(5)), "plain", &token, 10)
        .await
        .unwrap_err();
    assert!(
        e.contains("biz_misconfigured")
            && e.contains("mod 3 is not the class layout epoch 1 gives database"),
        "{e}"
    );
}

/// Each step cut off midway, by killing the command or stopping a database, then
/// finished by running it again or rolled back by the opposite command: servers keep
/// serving from the state left behind, and no ID repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_cut_off_midway_are_safe_and_finish_when_run_again() {
    let c = Cluster::start(3, 1, "200", true);
    bulk_bizs(&c.dbs, 400);
    let mut servers = Servers::start(2, &c.toml).await;
    let traffic = Traffic::start(servers.bases(), &c.plain_token, &c.odd_token);
    let (dbs, urls, one) = (c.dbs, c.urls, c.toml);

    // Killed midway through 1 → 2: the change is under way, servers serve.
    let out = kill_midway(&one, &["db", "add", "pg1", &urls[1]], "rows moved", 100);
    assert!(out.contains("layout epoch 0 → 1"), "{out}");
    let list = cli_ok(&toml_for(&dbs, &[0, 1]), &["db", "list"]);
    assert!(list.contains("change under way to epoch 1"), "{list}");
    assert_consistent(&dbs, 2);
    // Run again at once: it watches the cut-off command's row until it has been
    // silent for SILENT (no clock of another host is read), then finishes the change.
    let out = cli_ok(&one, &["db", "add", "pg1", &urls[1]]);
    let waiting = format!("waiting {} s to see whether", SILENT.as_secs_f64());
    assert!(out.contains(&waiting), "{out}");
    assert!(
        out.contains("finishing the change to layout epoch 1"),
        "{out}"
    );
    assert!(out.contains("layout epoch 1 is done"), "{out}");
    let two = toml_for(&dbs, &[0, 1]);
    servers.rolling_restart(&two).await;

    // A database stopped midway through 2 → 3: the command stops, naming it.
    let file = config_file(&two);
    let mut child = ChildGuard(
        Command::new(segmint_bin())
            .arg("--config")
            .arg(file.path())
            .args(["db", "add", "pg2", &urls[2]])
            .env_remove("SEGMINT_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut printed = String::new();
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut moved = 0;
    for line in lines.by_ref() {
        let line = line.unwrap();
        printed.push_str(&line);
        printed.push('\n');
        if line.contains("rows moved") {
            moved += 1;
            if moved == 100 {
                dbs.stop(1);
                break;
            }
        }
    }
    for line in lines {
        printed.push_str(&line.unwrap());
        printed.push('\n');
    }
    let status = child.0.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        !status.success(),
        "the change went on without pg1:\n{printed}"
    );
    assert!(
        stderr.contains("\"pg1\"") && stderr.contains("run the command again"),
        "{stderr}"
    );
    // pg1 stays down a while under traffic before it comes back.
    tokio::time::sleep(Duration::from_millis(800)).await;
    dbs.start_again(1);
    assert_consistent(&dbs, 3);
    // Real time past SILENT since the cut-off command's last beat, the servers
    // serving (and watching the cut-off change) meanwhile, before it is run again.
    tokio::time::sleep(SILENT + Duration::from_millis(100)).await;
    let out = cli_ok(&two, &["db", "add", "pg2", &urls[2]]);
    assert!(out.contains("layout epoch 2 is done"), "{out}");
    let three = toml_for(&dbs, &[0, 1, 2]);
    servers.rolling_restart(&three).await;

    // Killed midway through 3 → 2, then rolled back: pg1 stays.
    let out = kill_midway(&three, &["db", "remove", "pg1"], "rows moved", 100);
    assert!(out.contains("layout epoch 2 → 3"), "{out}");
    assert_consistent(&dbs, 3);
    // As above: real time past SILENT under the servers, then the opposite command.
    tokio::time::sleep(SILENT + Duration::from_millis(100)).await;
    let out = cli_ok(&three, &["db", "add", "pg1"]);
    assert!(
        out.contains("superseding the change to layout epoch 3"),
        "{out}"
    );
    assert!(
        out.contains("layout epoch 4 is done: pg0 (0 mod 3), pg1 (1 mod 3), pg2 (2 mod 3)"),
        "{out}"
    );
    // Traffic on the final layout for a while, not a condition.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let streams = traffic.finish().await;
    check_streams(&streams);
    assert_consistent(&dbs, 3);
    for biz in ["plain", "bulk1", "bulk400"] {
        let rows = live_rows(&dbs, 3, biz);
        assert_eq!(rows.len(), 3, "{biz}: {rows:?}");
        assert!(rows.iter().all(|r| r.3 == 4 && r.1 == 3), "{biz}: {rows:?}");
    }
    assert_eq!(
        live_rows(&dbs, 3, "odd")
            .iter()
            .map(|r| (r.1, r.2))
            .collect::<Vec<_>>(),
        vec![(6, 1), (6, 3), (6, 5)]
    );
    // The bulk rows moved above the highest max_id of all: 400 × 1000.
    let fence: i64 = dbs
        .sql(
            2,
            "SELECT min(max_id) FROM tiny_id_info WHERE biz_type = 'bulk1'",
        )
        .parse()
        .unwrap();
    assert!(fence >= 1000, "{fence}");
}

/// Even/odd rows re-classed by hand to 0 and 1 mod 3 without raising `max_id`: the
/// running server refuses the biz, naming the rows, instead of issuing IDs the other
/// database issued; once the rows are raised above every earlier ID it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_changed_by_hand_without_a_fence_is_refused() {
    let Cluster {
        dbs,
        toml,
        plain_token: token,
        ..
    } = Cluster::start(2, 2, "10", false);
    let server = ServerProcess::start(&toml).await;
    let remote = server.remote(Duration::from_secs(5));
    let mut seen = HashSet::new();
    // Both rows give out segments.
    while dbs.version(0, "plain") < 3 || dbs.version(1, "plain") < 3 {
        for id in v1_ids(&remote, "plain", &token, 10).await {
            assert!(seen.insert(id), "duplicate {id}");
        }
    }
    dbs.sql(
        0,
        "UPDATE tiny_id_info SET delta = 3, remainder = 0 WHERE biz_type = 'plain'",
    );
    dbs.sql(
        1,
        "UPDATE tiny_id_info SET delta = 3, remainder = 1 WHERE biz_type = 'plain'",
    );
    let refusal =
        eventually(
            Duration::from_secs(10),
            "the biz is refused",
            async || match try_v1_ids(&remote, "plain", &token, 10).await {
                Ok(ids) => {
                    for id in ids {
                        assert!(seen.insert(id), "duplicate {id} after the edit");
                    }
                    Err("still served".to_string())
                }
                // Between the two edits the classes overlap, which is refused too.
                Err(e) if e.contains("overlapping residue classes") => Err(e),
                Err(e) => Ok(e),
            },
        )
        .await;
    assert!(
        refusal.contains("biz_misconfigured")
            && refusal.contains("without a fence")
            && refusal.contains("pg0")
            && refusal.contains("pg1"),
        "{refusal}"
    );
    // Still refused a while later: the refusal holds until the rows are raised.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(try_v1_ids(&remote, "plain", &token, 10).await.is_err());
    assert!(refusal.contains("segmint db fence"), "{refusal}");
    // Every ID reserved so far lies at or below the rows' max_id.
    let top = highest_max_id(&dbs, 2, "plain");
    for name in ["pg0", "pg1"] {
        let above = (top + 1000).to_string();
        cli_ok(&toml, &["db", "fence", name, "--above", &above]);
    }
    // Served again: what the cache still held, then IDs from the new classes, above
    // the raised rows.
    let mut raised = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while raised.len() < 100 {
        assert!(Instant::now() < deadline, "not served again: {raised:?}");
        match try_v1_ids(&remote, "plain", &token, 10).await {
            Ok(ids) => {
                for id in ids {
                    assert!(seen.insert(id), "duplicate {id}");
                    if id > top {
                        assert!(id > top + 1000, "{id} lies between {top} and the fence");
                        raised.push(id);
                    }
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(raised.iter().any(|id| id % 3 == 0) && raised.iter().any(|id| id % 3 == 1));
    assert!(raised.iter().all(|id| id % 3 != 2), "{raised:?}");
}

/// The store's layout primitives and a whole change through the library, on
/// PostgreSQL and on embedded files: compare-and-set on reclassing, layout rows written
/// once per epoch, lease rows whose bounds only grow; rows moved 1 → 2 → 1 databases
/// above every reserved ID, the odd biz odd throughout, the removed database's rows
/// frozen and never reserved from.
async fn a_layout_change_moves_rows_on_either_engine(kind: Kind) {
    use segmint::biz::BizTag;
    use segmint::config::Config;
    use segmint::layout::{Layout, LayoutChange, LayoutState};
    use segmint::segment::Residue;
    use segmint::store::{BizRow, Inserted, LeaseSet, Reclass, Store};

    let dbs = Databases::start(kind, 2);
    let urls = dbs.urls();
    let one = Config::from_toml(&toml_for(&dbs, &[0])).unwrap();
    let store = Store::connect(&one).unwrap();
    for (name, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let plain = BizTag::parse("plain").unwrap();
    let odd = BizTag::parse("odd").unwrap();
    store.cluster().add_biz(&plain, 10, 1, None).await.unwrap();
    store
        .cluster()
        .add_biz(&odd, 10, 1, Some(Residue::new(2, 1).unwrap()))
        .await
        .unwrap();
    let mut reserved = Vec::new();
    for _ in 0..5 {
        for biz in [&plain, &odd] {
            reserved.push((
                biz.to_string(),
                store.reserve(biz, None, None).await.unwrap().range,
            ));
        }
    }
    let top = |biz: &str| {
        reserved
            .iter()
            .filter(|(b, _)| b == biz)
            .map(|(_, r)| r.max_id())
            .max()
            .unwrap()
    };

    // The primitives, on a scratch row.
    let two = one.with_database("pg1", &urls[1]).unwrap();
    let both = Store::connect(&two).unwrap();
    for (name, r) in both.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let before = Layout {
        epoch: 0,
        members: vec![segmint::layout::Member {
            name: "pg0".into(),
            class: Residue::ALL,
        }],
        state: LayoutState::Done,
        lost: Vec::new(),
    };
    let mut lines = Vec::new();
    let mut say = |l: String| lines.push(l);
    let done = both
        .cluster()
        .change_layout(&LayoutChange::Add("pg1".into()), &before, &mut say)
        .await
        .unwrap();
    assert_eq!(done.epoch, 1, "{lines:?}");
    let rows = |i: usize, biz: &str| {
        dbs.sql(
            i,
            &format!(
                "SELECT delta, remainder, layout_epoch, frozen, max_id FROM tiny_id_info WHERE biz_type = '{biz}'"
            ),
        )
    };
    // PostgreSQL writes booleans as t/f, SQLite as 1/0.
    let fields = |s: String| -> Vec<i64> {
        s.split('|')
            .map(|x| match x {
                "t" => 1,
                "f" => 0,
                x => x.parse().unwrap(),
            })
            .collect()
    };
    for (biz, classes) in [("plain", [(2, 0), (2, 1)]), ("odd", [(4, 1), (4, 3)])] {
        for (i, (d, r)) in classes.into_iter().enumerate() {
            let f = fields(rows(i, biz));
            assert_eq!(&f[..3], &[d, r, 1], "{biz} on pg{i}: {f:?}");
            assert!(
                f[4] >= top(biz),
                "{biz} on pg{i} below what was reserved: {f:?}"
            );
        }
    }
    // Segments now come from both databases, above every earlier one, in class.
    let mut from = std::collections::HashSet::new();
    for _ in 0..40 {
        let r = both.reserve(&odd, None, None).await.unwrap();
        assert!(r.range.first_id().unwrap() > top("odd"), "{r:?}");
        assert_eq!(r.range.first_id().unwrap() % 2, 1, "{r:?}");
        from.insert(r.database);
    }
    assert_eq!(from.len(), 2, "both databases give out segments");

    // Back to one: pg1's rows frozen, never reserved from again.
    let done = both
        .cluster()
        .change_layout(&LayoutChange::Remove("pg1".into()), &before, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(done.epoch, 2);
    let pg1 = rows(1, "plain");
    for _ in 0..20 {
        let r = both.reserve(&plain, None, None).await.unwrap();
        assert_eq!(r.database, 0, "{r:?}");
        assert_eq!(r.range.residue(), Residue::ALL);
    }
    assert_eq!(rows(1, "plain"), pg1);
    assert_eq!(fields(pg1)[3], 1, "pg1's row is frozen");

    // Compare-and-set: a stale version or max_id changes nothing.
    let db0 = dbs.sql(
        0,
        "SELECT version, max_id FROM tiny_id_info WHERE biz_type = 'plain'",
    );
    let (v, m) = db0.split_once('|').unwrap();
    let (v, m): (i64, i64) = (v.parse().unwrap(), m.parse().unwrap());
    let to = Reclass {
        version: v + 1,
        max_id: m,
        delta: 1,
        remainder: 0,
        epoch: 2,
        frozen: true,
        claimed_by: 2,
    };
    let raw = raw_store(&two, 0);
    assert!(raw.reclass("plain", v - 1, m, &to).await.unwrap().is_none());
    assert!(raw.reclass("plain", v, m + 1, &to).await.unwrap().is_none());
    let frozen = raw.reclass("plain", v, m, &to).await.unwrap().unwrap();
    assert!(frozen.frozen && frozen.version == v + 1 && frozen.claimed_by == 2);
    // Layout rows: one per epoch; `done` and `superseded` are final, and a claim
    // inserts only where the epoch has no row.
    let epochs = || {
        let concat = match dbs.kind {
            Kind::MySql => "concat(epoch, ':', state)",
            _ => "epoch || ':' || state",
        };
        dbs.sql(
            0,
            &format!("SELECT {concat} FROM segmint_layout ORDER BY epoch"),
        )
    };
    assert_eq!(epochs(), "0:done\n1:done\n2:done");
    let moving = |epoch: i64| segmint::store::LayoutRow {
        epoch,
        members: "pg0=1:0".into(),
        state: "moving".into(),
        changed_ms: 1,
    };
    assert!(!raw.put_layout(&moving(2)).await.unwrap(), "done is final");
    assert!(!raw.claim_layout(&moving(2)).await.unwrap());
    assert!(raw.claim_layout(&moving(3)).await.unwrap());
    assert!(!raw.claim_layout(&moving(3)).await.unwrap(), "claimed once");
    assert!(raw.put_layout(&moving(3)).await.unwrap(), "a heartbeat");
    assert_eq!(epochs(), "0:done\n1:done\n2:done\n3:moving");
    // A biz row is created only in an epoch no later layout is stored above: a command
    // that read the layouts before a change claimed epoch 3 writes nothing here.
    let fresh = |epoch: i64| BizRow {
        biz_type: "fresh".into(),
        begin_id: 0,
        max_id: 0,
        step: 10,
        delta: 1,
        remainder: 0,
        version: 0,
        description: Box::default(),
        epoch,
        frozen: false,
        claimed_by: 0,
    };
    assert_eq!(
        raw.insert_biz(&fresh(2)).await.unwrap(),
        Inserted::LayoutAbove(3)
    );
    assert!(raw.biz("fresh").await.unwrap().is_none(), "nothing written");
    assert_eq!(raw.insert_biz(&fresh(3)).await.unwrap(), Inserted::Yes);
    assert_eq!(raw.insert_biz(&fresh(3)).await.unwrap(), Inserted::Exists);
    // Lease rows: bounds only grow, the holder and expiry are set.
    let set = |holder: &str, expires_ms, last_ms, bound_ms| LeaseSet {
        worker_id: 7,
        holder: holder.into(),
        expires_ms,
        last_ms,
        bound_ms,
    };
    // Fenced by the epoch: only while it is moving.
    assert_eq!(
        raw.set_leases(2, &[set("x", 5, 100, 200)]).await.unwrap(),
        None
    );
    let a = raw
        .set_leases(3, &[set("x", 5, 100, 200)])
        .await
        .unwrap()
        .unwrap()
        .remove(0);
    let b = raw
        .set_leases(3, &[set("y", 9, 50, 300)])
        .await
        .unwrap()
        .unwrap()
        .remove(0);
    assert_eq!((a.holder.as_str(), a.last_ms, a.bound_ms), ("x", 100, 200));
    assert_eq!(
        (b.holder.as_str(), b.expires_ms, b.last_ms, b.bound_ms),
        ("y", 9, 100, 300)
    );
    assert_eq!(b.version, a.version + 1);
}

crate::by_kind!(a_layout_change_moves_rows_on_either_engine);
