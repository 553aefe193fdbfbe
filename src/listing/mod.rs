//! The bizs as `/v1/bizs` and `/status` list them: a page at a time, by name, by rate
//! (busiest first) or by runway (shortest first), filtered by part of the name, each
//! page after the opaque cursor the previous one returned. [`select`] chooses a page
//! for both routes.
//!
//! By name, a page is a binary search in the [`NameIndex`] and a walk of the page (and
//! of the names a filter skips): a million bizs cost what ten do. The cursor is the
//! last name shown, so paging returns every biz exactly once and in order while bizs
//! are added or removed (one added behind the cursor is not shown, one ahead is).
//!
//! By rate or runway, only the bizs in use here have the figure: they come first, the
//! page's share of them picked without sorting them all, then the bizs never used, by
//! name. The cursor is then the figure and name of the last biz shown (or, among the
//! bizs never used, its name). Figures move between requests, so a biz whose figure
//! changed may be shown twice or not at all: each page is in the order of its moment.

use std::cmp::Ordering;
use std::collections::HashSet;

use crate::biz::BizTag;
use crate::metrics::BizStats;

pub mod index;

pub use index::{NameIndex, Names};

/// Bizs per page of `/v1/bizs` when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// Most bizs per page.
pub const MAX_LIMIT: usize = 1_000;
/// Longest `q`: no biz name is longer.
const MAX_QUERY: usize = 63;

/// The order of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By name.
    Name,
    /// The highest issue rate first.
    Rate,
    /// The shortest runway first.
    Runway,
}

impl Sort {
    pub const ALL: [Sort; 3] = [Sort::Name, Sort::Rate, Sort::Runway];

    /// The value of `sort=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Rate => "rate",
            Sort::Runway => "runway",
        }
    }

    /// Its letter in a cursor.
    fn letter(self) -> char {
        match self {
            Sort::Name => 'n',
            Sort::Rate => 'r',
            Sort::Runway => 'w',
        }
    }
}

/// A parameter of a listing that cannot be used: which, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{param}` {why}")]
pub struct BadParam {
    pub param: &'static str,
    pub why: String,
}

/// Where a page starts: after the biz it names.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    /// The order it is a position in.
    sort: Sort,
    at: At,
}

#[derive(Debug, Clone, PartialEq)]
enum At {
    /// After this name, by name or among the bizs never used.
    Name(String),
    /// Among the bizs in use, after this sort key (see [`ranked`]) and name.
    Ranked(f64, String),
}

/// Length of a cursor's text before the name: the sort's letter, the part's letter
/// and the key's 16 hex digits.
const CURSOR_HEAD: usize = 18;

impl Cursor {
    /// The cursor as clients pass it back: hex, so that it needs no escaping in a URL,
    /// and opaque, so that no client builds one.
    pub fn encode(&self) -> String {
        let (part, key, name) = match &self.at {
            At::Name(name) => ('b', 0, name),
            At::Ranked(key, name) => ('a', key.to_bits(), name),
        };
        hex::encode(format!("{}{part}{key:016x}{name}", self.sort.letter()))
    }

    /// The cursor that [`Cursor::encode`] wrote as `text`.
    ///
    /// # Errors
    /// [`BadParam`] naming `after` for any other text.
    pub fn decode(text: &str) -> Result<Cursor, BadParam> {
        let bad = || BadParam {
            param: "after",
            why: "is not a cursor this server wrote: pass the `next` of the previous page, \
                  or leave `after` out for the first page"
                .into(),
        };
        let plain = hex::decode(text)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .filter(|p| p.is_ascii() && p.len() > CURSOR_HEAD)
            .ok_or_else(bad)?;
        let first = plain.chars().next();
        let sort = Sort::ALL
            .into_iter()
            .find(|s| Some(s.letter()) == first)
            .ok_or_else(bad)?;
        let key = u64::from_str_radix(&plain[2..CURSOR_HEAD], 16).map_err(|_| bad())?;
        let name = BizTag::parse(&plain[CURSOR_HEAD..])
            .map_err(|_| bad())?
            .to_string();
        let at = match &plain[1..2] {
            "a" if sort != Sort::Name => At::Ranked(f64::from_bits(key), name),
            "b" => At::Name(name),
            _ => return Err(bad()),
        };
        Ok(Cursor { sort, at })
    }
}

/// What a listing asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Bizs per page, 1 to [`MAX_LIMIT`].
    pub limit: usize,
    pub sort: Sort,
    /// Where the page starts; `None`: at the first biz.
    pub after: Option<Cursor>,
    /// Only names holding this, in lower case (compared without case).
    pub q: Option<String>,
}

impl Query {
    /// The query of the parameters `param` gives (`limit`, `sort`, `after`, `q`), with
    /// `default_limit` bizs per page unless `limit` says otherwise. An empty `q` or
    /// `after` is no filter and the first page, as an empty search form sends them.
    ///
    /// # Errors
    /// [`BadParam`] naming the first parameter that cannot be used.
    pub fn parse<'p>(
        param: impl Fn(&str) -> Option<&'p str>,
        default_limit: usize,
    ) -> Result<Query, BadParam> {
        let echo = |value: &str| value.chars().take(32).collect::<String>();
        let limit = match param("limit") {
            None => default_limit,
            Some(value) => value
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| value.parse::<usize>().ok())
                .flatten()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| BadParam {
                    param: "limit",
                    why: format!(
                        "must be a whole number from 1 to {MAX_LIMIT}, got `{}`",
                        echo(value)
                    ),
                })?,
        };
        let sort = match param("sort") {
            None => Sort::Name,
            Some(value) => Sort::ALL
                .into_iter()
                .find(|s| s.as_str() == value)
                .ok_or_else(|| BadParam {
                    param: "sort",
                    why: format!("must be `name`, `rate` or `runway`, got `{}`", echo(value)),
                })?,
        };
        let after = match param("after").filter(|v| !v.is_empty()) {
            None => None,
            Some(text) => {
                let cursor = Cursor::decode(text)?;
                if cursor.sort != sort {
                    return Err(BadParam {
                        param: "after",
                        why: format!(
                            "is a cursor of `sort={}`, not of `sort={}`: ask with the sort \
                             of the previous page, or leave `after` out for the first page",
                            cursor.sort.as_str(),
                            sort.as_str()
                        ),
                    });
                }
                Some(cursor)
            }
        };
        let q = match param("q").filter(|v| !v.is_empty()) {
            None => None,
            Some(q) if q.chars().count() > MAX_QUERY => {
                return Err(BadParam {
                    param: "q",
                    why: format!("is at most {MAX_QUERY} characters, as a biz name is"),
                });
            }
            Some(q) => Some(q.to_ascii_lowercase()),
        };
        Ok(Query {
            limit,
            sort,
            after,
            q,
        })
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The bizs of the page, in order.
    pub names: Vec<String>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
    /// How many bizs the listing has over all its pages: those matching `q`.
    pub total: usize,
}

/// The page `query` asks for, of the bizs of `index` and those `in_use` gives (called
/// only to sort by rate or runway: the figures of every biz in use here).
pub fn select(index: &NameIndex, query: &Query, in_use: impl FnOnce() -> Vec<BizStats>) -> Page {
    match query.sort {
        Sort::Name => by_name(index, query),
        sort => ranked(index, query, sort, &in_use()),
    }
}

/// Whether `name` holds `q` (lower case), ASCII case ignored; anything without `q`.
fn matches(name: &str, q: Option<&str>) -> bool {
    q.is_none_or(|q| {
        name.as_bytes()
            .windows(q.len())
            .any(|w| w.eq_ignore_ascii_case(q.as_bytes()))
    })
}

/// At most `limit` items of `items`, and whether any is left.
fn take<T>(mut items: impl Iterator<Item = T>, limit: usize) -> (Vec<T>, bool) {
    let page: Vec<T> = items.by_ref().take(limit).collect();
    (page, items.next().is_some())
}

/// The names of `index` matching `q`.
fn matching(index: &NameIndex, q: Option<&str>) -> usize {
    match q {
        None => index.len(),
        Some(_) => index.names_from(0).filter(|n| matches(n, q)).count(),
    }
}

fn by_name(index: &NameIndex, query: &Query) -> Page {
    let q = query.q.as_deref();
    let from = match &query.after {
        Some(Cursor {
            at: At::Name(name), ..
        }) => index.after(name),
        _ => 0,
    };
    let (names, more) = take(
        index.names_from(from).filter(|n| matches(n, q)),
        query.limit,
    );
    let next = names.last().filter(|_| more).map(|last| Cursor {
        sort: Sort::Name,
        at: At::Name((*last).to_owned()),
    });
    Page {
        names: names.into_iter().map(str::to_owned).collect(),
        next,
        total: matching(index, q),
    }
}

/// By rate or runway: the bizs in use by their sort key (the rate negated, so that the
/// highest comes first; the runway, infinite when idle), then the name; then the bizs
/// of `index` never used, by name.
fn ranked(index: &NameIndex, query: &Query, sort: Sort, in_use: &[BizStats]) -> Page {
    let q = query.q.as_deref();
    let key = |s: &BizStats| match sort {
        Sort::Rate => -s.rate,
        Sort::Name | Sort::Runway => s.runway_seconds.unwrap_or(f64::INFINITY),
    };
    let order = |a: &(f64, &str), b: &(f64, &str)| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1));
    let used: HashSet<&str> = in_use.iter().map(|s| s.biz.as_str()).collect();
    let figures: Vec<(f64, &str)> = in_use
        .iter()
        .filter(|s| matches(&s.biz, q))
        .map(|s| (key(s), s.biz.as_str()))
        .collect();
    let listed_twice = figures.iter().filter(|(_, n)| index.contains(n)).count();
    let total = figures.len() + matching(index, q) - listed_twice;

    let mut figures = match &query.after {
        None => figures,
        Some(Cursor {
            at: At::Ranked(key, name),
            ..
        }) => {
            let cursor = (*key, name.as_str());
            figures
                .into_iter()
                .filter(|f| order(f, &cursor) == Ordering::Greater)
                .collect()
        }
        // Past the bizs in use already.
        Some(Cursor {
            at: At::Name(_), ..
        }) => Vec::new(),
    };
    let limit = query.limit;
    let more_in_use = figures.len() > limit;
    if more_in_use {
        figures.select_nth_unstable_by(limit, order);
        figures.truncate(limit);
    }
    figures.sort_unstable_by(order);
    let ranked_next = |f: Option<&(f64, &str)>| {
        f.map(|(key, name)| Cursor {
            sort,
            at: At::Ranked(*key, (*name).to_owned()),
        })
    };
    let mut names: Vec<String> = figures.iter().map(|(_, n)| (*n).to_owned()).collect();
    if more_in_use {
        return Page {
            names,
            next: ranked_next(figures.last()),
            total,
        };
    }
    let from = match &query.after {
        Some(Cursor {
            at: At::Name(name), ..
        }) => index.after(name),
        _ => 0,
    };
    let never_used = index
        .names_from(from)
        .filter(|n| !used.contains(n) && matches(n, q));
    let (rest, more) = take(never_used, limit - names.len());
    let next = match rest.last() {
        _ if !more => None,
        Some(last) => Some(Cursor {
            sort,
            at: At::Name((*last).to_owned()),
        }),
        // The page ends with the last biz in use; the bizs never used follow.
        None => ranked_next(figures.last()),
    };
    names.extend(rest.into_iter().map(str::to_owned));
    Page { names, next, total }
}

#[cfg(test)]
mod tests;
