//! The HTML of `/status`: a page of bizs (50 unless `limit` says otherwise) with a
//! search box, the three orders and a link to the next page, the totals, the
//! databases and the step policy. Its size depends on the page, not on the number of
//! bizs.

use std::fmt::Write;

use super::status::Report;
use crate::listing::{Query, Sort};
use crate::shape::clocks::human_ms;

/// Bizs per page of `/status` when `limit` is not given.
pub(super) const STATUS_LIMIT: usize = 50;

/// Bizs on this server, over all pages.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counts {
    /// In the catalog.
    pub(super) known: usize,
    /// That served IDs here.
    pub(super) in_use: usize,
}

/// Escapes text for HTML element content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration in seconds, as people read it: `42 s`, `12 min`, `3.5 h`, `∞`.
fn human_secs(secs: Option<f64>) -> String {
    match secs {
        None => "∞".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s"),
        Some(s) if s < 7200.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

/// The address of `/status` (relative, as the page's other links) in `sort`, filtered
/// by `query`'s `q`, with its `limit` if not the page's own, from `after` if given;
/// escaped for an attribute.
fn link(query: &Query, sort: Sort, after: Option<&str>) -> String {
    let mut params = form_urlencoded::Serializer::new(String::new());
    if sort != Sort::Name {
        params.append_pair("sort", sort.as_str());
    }
    if let Some(q) = &query.q {
        params.append_pair("q", q);
    }
    if query.limit != STATUS_LIMIT {
        params.append_pair("limit", &query.limit.to_string());
    }
    if let Some(after) = after {
        params.append_pair("after", after);
    }
    let params = params.finish();
    if params.is_empty() {
        "status".into()
    } else {
        escape(&format!("status?{params}"))
    }
}

/// How `sort` is named on the page.
fn sort_name(sort: Sort) -> &'static str {
    match sort {
        Sort::Name => "by name",
        Sort::Rate => "busiest first",
        Sort::Runway => "shortest runway first",
    }
}

/// The search box, the orders and the line saying what the page shows.
fn navigation(report: &Report, query: &Query, counts: Counts) -> String {
    let orders: Vec<String> = Sort::ALL
        .into_iter()
        .map(|sort| {
            if sort == query.sort {
                format!("<strong>{}</strong>", sort_name(sort))
            } else {
                format!(
                    "<a href=\"{}\">{}</a>",
                    link(query, sort, None),
                    sort_name(sort)
                )
            }
        })
        .collect();
    let q = query.q.as_deref().unwrap_or("");
    let mut out = format!(
        "<p>{known} bizs known, {in_use} in use on this server.</p>\n\
         <form method=\"get\" action=\"status\"><input type=\"search\" name=\"q\" value=\"{q}\" \
         maxlength=\"63\" placeholder=\"part of a biz name\" aria-label=\"biz name contains\">\
         <input type=\"hidden\" name=\"sort\" value=\"{sort}\"> <button>Search</button></form>\n\
         <p>Order: {orders}.</p>\n<p>{shown} of {total} {matching}shown, {order}.",
        known = counts.known,
        in_use = counts.in_use,
        q = escape(q),
        sort = query.sort.as_str(),
        orders = orders.join(" · "),
        shown = report.bizs.len(),
        total = report.total,
        matching = if q.is_empty() {
            String::new()
        } else {
            format!("matching “{}” ", escape(q))
        },
        order = sort_name(query.sort),
    );
    if query.after.is_some() {
        let _ = write!(
            out,
            " <a href=\"{}\">First page</a>",
            link(query, query.sort, None)
        );
    }
    if let Some(next) = &report.next {
        let _ = write!(
            out,
            " <a href=\"{}\" rel=\"next\">Next page</a>",
            link(query, query.sort, Some(next))
        );
    }
    out.push_str("</p>\n");
    out
}

/// The bizs' table rows.
fn biz_rows(report: &Report) -> String {
    let mut bizs = String::new();
    for b in &report.bizs {
        let s = &b.stats;
        let low = s.runway_seconds.is_some_and(|r| r < 300.0) && s.issued > 0;
        let below = s.step > 0 && s.step < s.recommended_step;
        bizs.push_str(&format!(
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td{}>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td{}>{}</td><td>{}</td></tr>\n",
            escape(&s.biz),
            s.rate,
            s.peak_rate,
            if below { " class=\"warn\"" } else { "" },
            s.step,
            s.recommended_step,
            s.last_step_reason.map_or("", |r| r.as_str()),
            s.cached_ids,
            if low { " class=\"warn\"" } else { "" },
            human_secs(s.runway_seconds),
            escape(b.refused.as_deref().unwrap_or("")),
        ));
    }
    bizs
}

/// The databases' table rows.
fn database_rows(report: &Report) -> String {
    let mut dbs = String::new();
    for d in &report.databases {
        dbs.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td></tr>\n",
            escape(&d.name),
            escape(&d.location),
            escape(d.residue.as_deref().unwrap_or("-")),
            match d.clock_ahead_ms {
                Some(ms) if ms >= 0 => format!("{} ahead", human_ms(ms)),
                Some(ms) => format!("{} behind", human_ms(-ms)),
                None => "-".to_owned(),
            },
            if d.up && d.in_layout {
                ""
            } else {
                " class=\"warn\""
            },
            match (d.up, &d.fenced, d.in_layout) {
                (_, Some(_), _) => "fenced",
                (_, None, false) if d.layout == "behind" => "layout behind another database's",
                (_, None, false) if d.layout == "lost" => "declared lost",
                (_, None, false) if d.layout == "disagrees" =>
                    "layout disagrees with another database's",
                (_, None, false) => "not in the layout",
                (true, None, true) => "up",
                (false, None, true) => "down",
            },
            escape(
                d.fenced
                    .as_deref()
                    .or(d.last_error.as_deref())
                    .unwrap_or("")
            ),
        ));
    }
    dbs
}

/// What the page says of the cluster's membership.
fn membership_paragraph(report: &Report) -> String {
    let m = &report.membership;
    match m.epoch {
        None => "<p class=\"warn\">No layout done was read from the databases: no database is used. The cluster's membership is recorded by <code>segmint migrate</code>, with every configured database answering.</p>".to_owned(),
        Some(epoch) => {
            let mut p = format!("<p>Members: layout epoch {epoch}.");
            if !m.unconfigured.is_empty() {
                p.push_str(&format!(
                    " <span class=\"warn\">Members this server is not configured with (counted as not answering): {}.</span>",
                    escape(&m.unconfigured.join(", "))
                ));
            }
            if !m.not_members.is_empty() {
                p.push_str(&format!(
                    " <span class=\"warn\">Configured here but not members (never used): {}.</span>",
                    escape(&m.not_members.join(", "))
                ));
            }
            p.push_str("</p>");
            p
        }
    }
}

/// The whole page: the bizs of this page, the databases and membership, the sequences.
pub(super) fn render(report: &Report, query: &Query, counts: Counts) -> String {
    let bizs = biz_rows(report);
    let dbs = database_rows(report);
    let membership = membership_paragraph(report);
    let sequences = sequences_section(report);
    let p = &report.step_policy;
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>segmint status</title>
<meta http-equiv="refresh" content="5">
<style>
body {{ font: 14px system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 2em; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.warn {{ background: #fdd; }}
</style></head>
<body>
<h1>segmint {version}</h1>
<p>Adaptive step: {adaptive}; a segment aims to last {target} s at the peak rate, step at most {max}.
Rates are IDs per second over the last minute; the peak is the highest of the last 24 hours.
This page reloads every 5 seconds; the same figures are at <a href="v1/bizs">/v1/bizs</a> and <a href="metrics">/metrics</a>.</p>
<h2>Bizs</h2>
{navigation}<table>
<tr><th>biz</th><th>rate</th><th>peak</th><th>step</th><th>recommended step</th><th>last step because</th><th>cached IDs</th><th>runway</th><th>refused</th></tr>
{bizs}</table>
<h2>Databases</h2>
{membership}
<table>
<tr><th>database</th><th>location</th><th>class</th><th>this server's clock</th><th>state</th><th>last error</th></tr>
{dbs}</table>
{sequences}</body></html>
"#,
        version = env!("CARGO_PKG_VERSION"),
        navigation = navigation(report, query, counts),
        adaptive = if p.adaptive { "on" } else { "off" },
        target = p.target_secs,
        max = p.max,
    )
}

/// The sequence bizs this server knows and what it holds of each; nothing without any.
fn sequences_section(report: &Report) -> String {
    let q = &report.sequences;
    if q.bizs.is_empty() {
        return String::new();
    }
    let mut rows = String::new();
    for b in &q.bizs {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&b.biz),
            b.sections,
            b.step,
            b.owned,
            b.keys,
            b.key_bytes
        ));
    }
    format!(
        "<h2>Sequences</h2>\n<p>This server: {}; live servers: {}.</p>\n<table>\n\
         <tr><th>biz</th><th>sections</th><th>step</th><th>owned here</th><th>keys here</th><th>key bytes</th></tr>\n{rows}</table>\n",
        escape(&q.address),
        escape(&q.servers.join(", "))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<b a="x">&'"#),
            "&lt;b a=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_secs(None), "∞");
        assert_eq!(human_secs(Some(42.4)), "42 s");
        assert_eq!(human_secs(Some(720.0)), "12 min");
        assert_eq!(human_secs(Some(12_600.0)), "3.5 h");
    }
}
