//! The layout rules, example by example.

use super::*;

fn class(d: i64, r: i64) -> Residue {
    Residue::new(d, r).unwrap()
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

#[test]
fn spread_classes_partition_every_id() {
    let l = Layout::spread(3, &names(&["a", "b", "c"]), LayoutState::Done).unwrap();
    for id in 0..100 {
        let owners = l.members.iter().filter(|m| m.class.contains(id)).count();
        assert_eq!(owners, 1, "{id}");
    }
    assert_eq!(l.class_of("b"), Some(class(3, 1)));
    assert_eq!(l.class_of("z"), None);
    assert_eq!(l.owner_of(5), Some("c"));
}

#[test]
fn rows_round_trip_and_malformed_rows_are_named() {
    let l = Layout::spread(2, &names(&["a", "b-2"]), LayoutState::Moving).unwrap();
    let row = l.row(1234);
    assert_eq!(row.members, "a=2:0,b-2=2:1");
    assert_eq!(Layout::parse(&row).unwrap(), l);
    for members in ["a=2", "a=2:2", "a", "a=x:0"] {
        let bad = LayoutRow {
            members: members.into(),
            ..row.clone()
        };
        let e = Layout::parse(&bad).unwrap_err();
        assert!(e.contains("epoch 2") && e.contains("malformed"), "{e}");
    }
    let bad = LayoutRow {
        state: "half".into(),
        ..row
    };
    assert!(Layout::parse(&bad).unwrap_err().contains("half"));
}

#[test]
fn merge_keeps_the_furthest_state_and_refuses_disagreement() {
    let one = Layout::spread(1, &names(&["a"]), LayoutState::Done).unwrap();
    let two = Layout::spread(2, &names(&["a", "b"]), LayoutState::Moving).unwrap();
    let two_done = Layout {
        state: LayoutState::Done,
        ..two.clone()
    };
    let rows = [one.row(1), two.row(2), two_done.row(3), one.row(1)];
    let merged = merge(&rows).unwrap();
    assert_eq!(merged, vec![one.clone(), two_done.clone()]);
    assert_eq!(current(&merged), (Some(&two_done), None));
    let merged = merge(&[one.row(1), two.row(2)]).unwrap();
    assert_eq!(current(&merged), (Some(&one), Some(&two)));
    let other = Layout::spread(2, &names(&["a", "c"]), LayoutState::Done).unwrap();
    let e = merge(&[two.row(2), other.row(3)]).unwrap_err();
    assert!(e.contains("epoch 2 differs"), "{e}");
    assert_eq!(current(&[]), (None, None));
}

fn lay(epoch: i64, members: &[(&str, i64, i64)], state: LayoutState) -> Layout {
    Layout {
        epoch,
        members: members
            .iter()
            .map(|&(n, d, r)| Member {
                name: n.into(),
                class: class(d, r),
            })
            .collect(),
        state,
        lost: Vec::new(),
    }
}

#[test]
fn lost_members_round_trip_and_are_never_reused() {
    let lost = vec![Member {
        name: "b".into(),
        class: class(2, 1),
    }];
    let l = Layout::allocate(3, &names(&["a", "c"]), lost.clone(), LayoutState::Moving).unwrap();
    assert_eq!(l.row(1).members, "a=4:0,c=4:2,!b=2:1");
    assert_eq!(Layout::parse(&l.row(1)).unwrap(), l);
    assert!(l.is_lost("b") && !l.is_lost("a"));
    for id in 0..64 {
        let owners = l.members.iter().filter(|m| m.class.contains(id)).count();
        assert_eq!(owners, usize::from(id % 2 == 0), "{id}");
    }
    // Worker IDs of the lost class have no owner.
    assert_eq!(l.owner_of(3), None);
    assert_eq!(l.owner_of(2), Some("c"));
    // Two lost classes: 1 mod 2 and 0 mod 3 leave 2 and 4 mod 6.
    let more = vec![
        lost[0].clone(),
        Member {
            name: "d".into(),
            class: class(3, 0),
        },
    ];
    let l = Layout::allocate(4, &names(&["a"]), more, LayoutState::Moving).unwrap();
    assert_eq!(l.class_of("a"), Some(class(6, 2)));
    let all = vec![
        Member {
            name: "x".into(),
            class: class(2, 0),
        },
        lost[0].clone(),
    ];
    assert!(Layout::allocate(5, &names(&["a"]), all, LayoutState::Moving).is_err());
}

#[test]
fn a_first_change_needs_every_configured_class() {
    let half = lay(0, &[("a", 2, 0)], LayoutState::Done);
    let e = plan(&[], &half, &names(&["a", "c"]), &[]).unwrap_err();
    assert!(matches!(e, PlanError::Uncovered { id: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("missing"), "{e}");
    assert_eq!(uncovered([class(2, 0), class(2, 1)].into_iter()), None);
    assert_eq!(uncovered([class(3, 0), class(3, 2)].into_iter()), Some(1));
}

#[test]
fn overlap_is_a_shared_id() {
    for (a, b) in [((2, 0), (3, 0)), ((4, 1), (6, 3)), ((1, 0), (5, 4))] {
        assert!(overlap(class(a.0, a.1), class(b.0, b.1)), "{a:?} {b:?}");
    }
    for (a, b) in [((2, 0), (2, 1)), ((4, 1), (6, 0)), ((4, 0), (4, 2))] {
        assert!(!overlap(class(a.0, a.1), class(b.0, b.1)), "{a:?} {b:?}");
    }
}

#[test]
fn plan_adds_finishes_supersedes_and_declares_lost() {
    let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
    // Nothing stored: a first change from the configured classes.
    let Plan::Change {
        from,
        to,
        supersede,
        finishing,
    } = plan(&[], &before, &names(&["a", "b"]), &[]).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (from.epoch, to.epoch, supersede, finishing),
        (0, 1, None, false)
    );
    assert_eq!(to.describe(), "a (0 mod 2), b (1 mod 2)");
    let one = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Done);
    let stored = [before.clone(), one.clone()];
    assert_eq!(
        plan(&stored, &before, &names(&["a", "b"]), &[]).unwrap(),
        Plan::Already(one.clone())
    );
    // A change under way with the same databases is finished; with others, superseded.
    let two = lay(2, &[("a", 1, 0)], LayoutState::Moving);
    let stored = [before.clone(), one.clone(), two.clone()];
    let Plan::Change { to, finishing, .. } = plan(&stored, &before, &names(&["a"]), &[]).unwrap()
    else {
        panic!()
    };
    assert!(finishing && to == two);
    let Plan::Change {
        to,
        supersede,
        finishing,
        ..
    } = plan(&stored, &before, &names(&["a", "b"]), &[]).unwrap()
    else {
        panic!()
    };
    assert!(!finishing && supersede == Some(two.clone()) && to.epoch == 3);
    // Lost: the others keep their classes; every class the lost one held is kept out.
    let Plan::Change { to, .. } =
        plan(&stored[..2], &before, &names(&["a"]), &names(&["b"])).unwrap()
    else {
        panic!()
    };
    assert_eq!(to.describe(), "a (0 mod 2)");
    assert_eq!(to.lost_names(), names(&["b"]));
    assert_eq!(to.row(0).members, "a=2:0,!b=2:1");
    // A lost database never comes back under its name; one not in the layout is
    // not lost.
    let after = [
        before.clone(),
        one.clone(),
        Layout {
            state: LayoutState::Done,
            ..to
        },
    ];
    let e = plan(&after, &before, &names(&["a", "b"]), &[]).unwrap_err();
    assert_eq!(
        e,
        PlanError::Lost {
            name: "b".into(),
            epoch: 2
        }
    );
    assert!(e.to_string().contains("declared lost"), "{e}");
    let e = plan(&stored[..2], &before, &names(&["a"]), &names(&["z"])).unwrap_err();
    assert!(
        matches!(&e, PlanError::NotInLayout { name, .. } if name == "z"),
        "{e:?}"
    );
    assert!(e.to_string().contains("not in the layout"), "{e}");
    // Growing after a loss avoids the lost class.
    let Plan::Change { to, .. } = plan(&after, &before, &names(&["a", "c"]), &[]).unwrap() else {
        panic!()
    };
    assert_eq!(to.describe(), "a (0 mod 4), c (2 mod 4)");
    assert_eq!(to.lost_names(), names(&["b"]));
}

#[test]
fn a_command_targets_the_layout_in_force_with_one_database_more_or_less() {
    let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
    let order = names(&["a", "b", "c"]);
    let one = lay(1, &[("b", 2, 0), ("a", 2, 1)], LayoutState::Done);
    let stored = [before.clone(), one];
    let add = LayoutChange::Add("c".into());
    assert_eq!(
        target(&add, &stored, &before, &order).unwrap(),
        (names(&["a", "b", "c"]), vec![])
    );
    // Added by URL, not configured: last.
    let add = LayoutChange::Add("z".into());
    assert_eq!(
        target(&add, &stored, &before, &order).unwrap().0,
        names(&["z", "a", "b"])
    );
    let lost = LayoutChange::Lost("b".into());
    assert_eq!(
        target(&lost, &stored, &before, &order).unwrap(),
        (names(&["a"]), names(&["b"]))
    );
    let e = target(&LayoutChange::Remove("c".into()), &stored, &before, &order).unwrap_err();
    assert!(
        matches!(&e, PlanError::NotInLayout { name, epoch: 1, .. } if name == "c"),
        "{e:?}"
    );
    assert!(e.to_string().contains("not in the layout"), "{e}");
    // Before any change: the configured classes.
    assert_eq!(
        target(&LayoutChange::Add("b".into()), &[], &before, &order)
            .unwrap()
            .0,
        names(&["a", "b"])
    );
}

#[test]
fn required_names_every_database_that_may_hold_live_rows() {
    let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
    // Before any layout: the configured ones, and any a witness names.
    assert_eq!(
        required(&[], &before, &names(&["z"]), &[]),
        names(&["a", "z"])
    );
    let one = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Done);
    let stored = [before.clone(), one.clone()];
    // A configuration naming only `a` still needs `b`.
    assert_eq!(
        required(&stored, &before, &names(&["a", "b"]), &[]),
        names(&["a", "b"])
    );
    assert_eq!(
        required(&stored, &before, &[], &names(&["b"])),
        names(&["a"])
    );
    // A change above the layout in force adds its members; a removed database is
    // no longer needed once the removal is done.
    let two = lay(
        2,
        &[("a", 3, 0), ("b", 3, 1), ("c", 3, 2)],
        LayoutState::Moving,
    );
    let with = [before.clone(), one.clone(), two.clone()];
    assert_eq!(required(&with, &before, &[], &[]), names(&["a", "b", "c"]));
    let three = lay(3, &[("a", 1, 0)], LayoutState::Done);
    let removed = [
        before.clone(),
        one,
        Layout {
            state: LayoutState::Superseded,
            ..two
        },
        three,
    ];
    assert_eq!(
        required(&removed, &before, &names(&["b", "c"]), &[]),
        names(&["a"])
    );
}

#[test]
fn claims_start_on_the_newest_layouts_members() {
    let prev = lay(1, &[("q0", 1, 0)], LayoutState::Done);
    assert_eq!(
        claim_order(&prev, &names(&["q1", "q0"])),
        names(&["q0", "q1"])
    );
    assert_eq!(
        claim_order(&prev, &names(&["a-new", "q0"])),
        names(&["q0", "a-new"])
    );
    let prev = lay(2, &[("b", 2, 0), ("a", 2, 1)], LayoutState::Moving);
    assert_eq!(
        claim_order(&prev, &names(&["c", "b", "a"])),
        names(&["a", "b", "c"])
    );
}

#[test]
fn worker_ids_follow_a_layout_done_only() {
    let zero = lay(0, &[("a", 1, 0)], LayoutState::Done);
    let moving = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Moving);
    assert!(leases_allowed(&[zero.clone(), moving.clone()]));
    assert!(!leases_allowed(std::slice::from_ref(&moving)));
    assert!(!leases_allowed(&[]));
}

#[test]
fn fence_is_the_highest_max_id_and_version() {
    assert_eq!(fence([(5, 2), (9, 1), (7, 8)]), (9, 8));
    assert_eq!(fence([]), (0, 0));
}

#[test]
fn a_database_behind_lost_or_disagreeing_is_not_current() {
    let one = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Done);
    let two = lay(2, &[("a", 1, 0)], LayoutState::Done);
    let r = read(
        &[],
        &[
            ("a".into(), vec![one.row(1), two.row(2)]),
            ("b".into(), vec![one.row(1)]),
        ],
    )
    .unwrap();
    assert_eq!(
        r.standing,
        vec![
            Standing::Current,
            Standing::Behind {
                own: Some(1),
                newest: 2
            }
        ]
    );
    assert_eq!(current(&r.layouts).0, Some(&two));
    // Known from an earlier read: a database read alone is still behind.
    let r = read(&r.layouts, &[("b".into(), vec![one.row(1)])]).unwrap();
    assert_eq!(
        r.standing,
        vec![Standing::Behind {
            own: Some(1),
            newest: 2
        }]
    );
    // Lost.
    let lost = Layout {
        lost: vec![Member {
            name: "b".into(),
            class: class(2, 1),
        }],
        ..lay(2, &[("a", 2, 0)], LayoutState::Done)
    };
    let r = read(
        &[],
        &[
            ("a".into(), vec![one.row(1), lost.row(2)]),
            ("b".into(), vec![one.row(1)]),
        ],
    )
    .unwrap();
    assert_eq!(r.standing[1], Standing::Lost { epoch: 2 });
    // Two claims of one epoch with other members: neither database is used.
    let q1 = lay(2, &[("q0", 2, 0), ("q1", 2, 1)], LayoutState::Moving);
    let q2 = lay(2, &[("q0", 2, 0), ("q2", 2, 1)], LayoutState::Moving);
    let r = read(
        &[],
        &[
            ("q1".into(), vec![q1.row(1)]),
            ("q2".into(), vec![q2.row(1)]),
        ],
    )
    .unwrap();
    assert_eq!(r.standing, vec![Standing::Disagrees, Standing::Disagrees]);
    // Nothing stored anywhere: every database is current.
    let r = read(&[], &[("a".into(), vec![]), ("b".into(), vec![])]).unwrap();
    assert!(r.standing.iter().all(|s| *s == Standing::Current));
}

#[test]
fn restriction_inverts_restrict() {
    for d in 1..7 {
        for r in 0..d {
            let db = class(d, r);
            for m in 1..5 {
                for p in 0..m {
                    let within = class(m, p);
                    let row = db.restrict(within).unwrap();
                    assert_eq!(restriction(row, db), Some(within), "{db} {within}");
                }
            }
        }
    }
    // Not a restriction of the database's class.
    assert_eq!(restriction(class(3, 0), class(2, 0)), None);
    assert_eq!(restriction(class(4, 1), class(2, 1)), None);
}

#[test]
fn a_heal_needs_every_database_of_the_change_configured_and_just_read() {
    let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
    let pending = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Moving);
    let layouts = vec![before.clone(), pending.clone()];
    let configured = names(&["b", "a"]);
    assert_eq!(
        healing(&layouts, &before, &configured, &[0, 1], &[]),
        Heal::Move {
            pending: &layouts[1],
            parts: vec![1, 0]
        }
    );
    assert_eq!(
        healing(&layouts, &before, &configured, &[1], &[]),
        Heal::Lacks(names(&["a", "b"]))
    );
    assert_eq!(
        healing(&layouts, &before, &names(&["a"]), &[0], &[]),
        Heal::Lacks(names(&["a", "b"]))
    );
    assert_eq!(
        healing(&layouts[..1], &before, &configured, &[0, 1], &[]),
        Heal::Nothing
    );
    // A database a witness names that no layout explains is needed too.
    assert!(matches!(
        healing(&layouts, &before, &configured, &[0, 1], &names(&["c"])),
        Heal::Lacks(need) if need.contains(&"c".to_owned())
    ));
    assert!(frozen_by(&pending, "b", true, 1));
    assert!(
        !frozen_by(&pending, "b", true, 0),
        "frozen by another change"
    );
    assert!(!frozen_by(&pending, "b", false, 1), "thawed");
    assert!(
        !frozen_by(&pending, "c", true, 1),
        "not a member: frozen for good"
    );
}
