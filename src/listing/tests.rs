use super::*;

fn index(names: &[&str]) -> NameIndex {
    NameIndex::new(1, names.iter().copied())
}

fn query(sort: Sort, limit: usize) -> Query {
    Query {
        limit,
        sort,
        after: None,
        q: None,
    }
}

/// A biz in use with `rate` and `runway`.
fn used(biz: &str, rate: f64, runway: Option<f64>) -> BizStats {
    BizStats {
        rate,
        runway_seconds: runway,
        ..BizStats::idle(biz)
    }
}

/// Every page of `query`, following the cursors, with `in_use` for each.
fn walk(index: &NameIndex, mut query: Query, in_use: &[BizStats]) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    loop {
        let page = select(index, &query, || in_use.to_vec());
        assert!(page.names.len() <= query.limit);
        pages.push(page.names);
        match page.next {
            None => return pages,
            Some(next) => query.after = Some(Cursor::decode(&next.encode()).unwrap()),
        }
    }
}

#[test]
fn pages_by_name_return_every_biz_once_in_order_while_bizs_are_added() {
    let first: Vec<String> = (0..25).map(|i| format!("biz-{:03}", i * 2)).collect();
    let mut all = first.clone();
    let mut query = query(Sort::Name, 4);
    let mut seen = Vec::new();
    for round in 0.. {
        let index = NameIndex::new(round + 1, all.iter().map(String::as_str));
        let page = select(&index, &query, Vec::new);
        seen.extend(page.names);
        // Bizs added between pages, behind the cursor and ahead of it.
        all.push(format!("biz-000-{round}"));
        all.push(format!("biz-999-{round}"));
        match page.next {
            None => break,
            Some(next) => query.after = Some(next),
        }
    }
    let old: Vec<&String> = seen.iter().filter(|n| first.contains(n)).collect();
    assert_eq!(
        old,
        first.iter().collect::<Vec<_>>(),
        "each old biz once, in order"
    );
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "in order, none twice");
    assert!(
        seen.len() > first.len(),
        "bizs added ahead of the cursor are shown"
    );
}

#[test]
fn the_total_counts_the_matches_and_q_ignores_case() {
    let index = index(&["Order", "orders-eu", "user", "border", "x"]);
    let mut q = query(Sort::Name, 2);
    q.q = Some("ORDER".to_ascii_lowercase());
    let page = select(&index, &q, Vec::new);
    assert_eq!(page.names, ["Order", "border"]);
    assert_eq!(page.total, 3);
    assert_eq!(
        walk(&index, q, &[]).concat(),
        ["Order", "border", "orders-eu"]
    );
    let all = select(&index, &query(Sort::Name, 10), Vec::new);
    assert_eq!((all.total, all.next), (5, None));
}

#[test]
fn by_rate_the_busiest_come_first_then_the_bizs_never_used_by_name() {
    let index = index(&["a", "b", "c", "d", "e", "f"]);
    let in_use = [
        used("c", 5.0, Some(10.0)),
        used("e", 50.0, Some(1.0)),
        used("a", 5.0, None),
    ];
    // Every page size, so that a page ends inside, at and past the bizs in use.
    for limit in 1..=7 {
        let pages = walk(&index, query(Sort::Rate, limit), &in_use);
        assert_eq!(
            pages.concat(),
            ["e", "a", "c", "b", "d", "f"],
            "limit {limit}"
        );
        let page = select(&index, &query(Sort::Rate, limit), || in_use.to_vec());
        assert_eq!(page.total, 6);
    }
}

#[test]
fn by_runway_the_shortest_come_first_and_idle_bizs_last_of_those_in_use() {
    let index = index(&["a", "b", "c", "d"]);
    let in_use = [
        used("a", 1.0, Some(300.0)),
        used("b", 0.0, None),
        used("d", 9.0, Some(20.0)),
    ];
    for limit in 1..=4 {
        let pages = walk(&index, query(Sort::Runway, limit), &in_use);
        assert_eq!(pages.concat(), ["d", "a", "b", "c"], "limit {limit}");
    }
    let mut q = query(Sort::Runway, 10);
    q.q = Some("d".into());
    let page = select(&index, &q, || in_use.to_vec());
    assert_eq!((page.names, page.total), (vec!["d".to_string()], 1));
}

#[test]
fn a_biz_in_use_missing_from_the_index_is_counted_once() {
    let index = index(&["a", "b"]);
    let in_use = [used("gone", 3.0, None), used("a", 1.0, None)];
    let page = select(&index, &query(Sort::Rate, 10), || in_use.to_vec());
    assert_eq!(page.names, ["gone", "a", "b"]);
    assert_eq!(page.total, 3);
}

/// The parameters as a request gives them.
fn parse(pairs: &[(&str, &str)]) -> Result<Query, BadParam> {
    Query::parse(
        |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v),
        DEFAULT_LIMIT,
    )
}

#[test]
fn parameters_are_parsed_or_refused_by_name() {
    assert_eq!(parse(&[]).unwrap(), query(Sort::Name, DEFAULT_LIMIT));
    let q = parse(&[
        ("limit", "1000"),
        ("sort", "runway"),
        ("q", "Ord"),
        ("after", ""),
    ])
    .unwrap();
    assert_eq!(
        (q.limit, q.sort, q.q.as_deref(), q.after),
        (1000, Sort::Runway, Some("ord"), None)
    );
    assert_eq!(parse(&[("q", "")]).unwrap().q, None);
    let rate = Cursor {
        sort: Sort::Rate,
        at: At::Ranked(-2.5, "order".into()),
    };
    assert_eq!(Cursor::decode(&rate.encode()), Ok(rate.clone()));
    let encoded = rate.encode();
    assert_eq!(
        parse(&[("sort", "rate"), ("after", &encoded)])
            .unwrap()
            .after,
        Some(rate)
    );
    for (pairs, param, says) in [
        (&[("limit", "0")][..], "limit", "from 1 to 1000, got `0`"),
        (&[("limit", "1001")], "limit", "got `1001`"),
        (&[("limit", "-1")], "limit", "got `-1`"),
        (&[("limit", "")], "limit", "got ``"),
        (
            &[("limit", "99999999999999999999999")],
            "limit",
            "whole number",
        ),
        (
            &[("sort", "size")],
            "sort",
            "`name`, `rate` or `runway`, got `size`",
        ),
        (&[("after", "zz")], "after", "not a cursor"),
        (&[("after", "6e62")], "after", "not a cursor"),
        (
            &[("after", &hex::encode("nb0000000000000000a b"))],
            "after",
            "not a cursor",
        ),
        (
            &[("after", &encoded)],
            "after",
            "a cursor of `sort=rate`, not of `sort=name`",
        ),
        (&[("q", &"x".repeat(64))], "q", "at most 63"),
    ] {
        let e = parse(pairs).unwrap_err();
        assert_eq!(e.param, param, "{pairs:?}");
        assert!(e.to_string().contains(says), "{pairs:?}: {e}");
    }
}
