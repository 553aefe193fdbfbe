//! Parsing the exports that `segmint import` reads: Tinyid's `tiny_id_info` and Leaf's
//! `leaf_alloc`, as `mysql --batch` writes a table: a header line of column names, then
//! one row per line, fields separated by tabs, `NULL` for a null, and `\\`, `\t`, `\n`,
//! `\r`, `\0` escaping the characters that would break the format. Pure: no IO, so the
//! whole file is checked before anything is written.
//!
//! The import takes the form the layout change has: [`parse`] checks the file, the
//! store reads every database's rows, [`plan`] decides what each database does with
//! each biz, and the store carries the plans out (inserting, raising, describing).
//!
//! ```text
//!   parse the file ─malformed─▶ ParseError, before any read
//!   read: each database's rows and its class in the layout in force
//!   plan, per biz: any database refuses ──▶ the biz is refused everywhere
//!                  else per database: missing ──▶ Create (the old max_id, the class
//!                  narrowed to the biz's), below ──▶ Raise, at or above ──▶ Unchanged
//!   write: the rows to create, one statement per database a chunk; then raises and
//!          descriptions one by one
//! ```

use std::collections::HashMap;

use crate::biz::BizTag;
use crate::rows::BizRow;
use crate::segment::Residue;

/// Which system's table the file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Tinyid's `tiny_id_info`.
    Tinyid,
    /// Leaf's `leaf_alloc`.
    Leaf,
}

/// One biz to import, merged over the file's rows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The biz.
    pub biz: BizTag,
    /// The highest `max_id` of its rows: the old system issued nothing above it.
    pub max_id: i64,
    /// The widest step of its rows.
    pub step: i64,
    /// The class the old rows together issued from, when not every ID (a Tinyid biz
    /// kept to odd IDs); segmint keeps the biz in it.
    pub within: Option<Residue>,
    /// Leaf's description; empty for Tinyid.
    pub description: String,
    /// The file line of the biz's first row, for messages.
    pub line: usize,
}

/// A malformed file: where, and what is wrong. Nothing is imported then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}{}: {message}", column.as_ref().map(|c| format!(", column {c}")).unwrap_or_default())]
pub struct ParseError {
    /// The 1-based line of the file.
    pub line: usize,
    /// The column, by position and name, when one field is at fault.
    pub column: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// What a source's header may name: the columns needed, then those read if present,
/// then those accepted and ignored.
struct Columns {
    /// Columns every file must have: biz name, max_id, step (and Tinyid's class).
    required: &'static [&'static str],
    /// Columns read when present.
    optional: &'static [&'static str],
    /// Columns of the old table that segmint has no use for.
    ignored: &'static [&'static str],
}

impl Source {
    fn columns(self) -> Columns {
        match self {
            Source::Tinyid => Columns {
                required: &["biz_type", "max_id", "step", "delta", "remainder"],
                optional: &[],
                ignored: &["id", "begin_id", "create_time", "update_time", "version"],
            },
            Source::Leaf => Columns {
                required: &["biz_tag", "max_id", "step"],
                optional: &["description"],
                ignored: &["update_time"],
            },
        }
    }
}

/// One data row, its fields by column name.
struct Row<'a> {
    /// The 1-based file line.
    line: usize,
    /// The header's column names, in order.
    header: &'a [String],
    /// The unescaped fields; `None` for `NULL`.
    fields: Vec<Option<String>>,
}

impl Row<'_> {
    fn error(&self, column: &str, message: String) -> ParseError {
        let at = self.header.iter().position(|h| h == column).unwrap_or(0);
        ParseError {
            line: self.line,
            column: Some(format!("{} ({column})", at + 1)),
            message,
        }
    }

    fn get(&self, column: &str) -> Option<&str> {
        let at = self.header.iter().position(|h| h == column)?;
        self.fields.get(at)?.as_deref()
    }

    fn text(&self, column: &str) -> Result<&str, ParseError> {
        self.get(column)
            .ok_or_else(|| self.error(column, "is NULL".into()))
    }

    fn number(&self, column: &str) -> Result<i64, ParseError> {
        let text = self.text(column)?;
        text.parse().map_err(|_| {
            self.error(
                column,
                format!("`{text}` is not a whole number in the range of a bigint"),
            )
        })
    }
}

/// Parses an export of `source`'s table; rows of one biz (a Tinyid biz exported from
/// each of its databases) are merged into one [`Import`].
///
/// # Errors
/// [`ParseError`] for the first fault: an unknown, repeated or missing column, a row
/// whose field count differs from the header's, a bad escape, a NULL or malformed
/// value, an invalid biz name, or rows of one biz that no single class describes.
pub fn parse(source: Source, text: &str) -> Result<Vec<Import>, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.is_empty());
    let Some((first, header)) = lines.next() else {
        return Err(ParseError {
            line: 1,
            column: None,
            message: "the file is empty; expected a header line of column names".into(),
        });
    };
    let header = parse_header(source, first, header)?;
    let mut imports: Vec<Import> = Vec::new();
    // Where each biz is in `imports`: a file of a million bizs is read in one pass.
    let mut index: HashMap<BizTag, usize> = HashMap::new();
    // Per biz (same order as `imports`): Tinyid's delta and the remainders seen.
    let mut classes: Vec<(i64, Vec<i64>)> = Vec::new();
    for (line, text) in lines {
        let fields = split(line, text)?;
        if fields.len() != header.len() {
            return Err(ParseError {
                line,
                column: None,
                message: format!(
                    "has {} fields, the header has {}",
                    fields.len(),
                    header.len()
                ),
            });
        }
        let row = Row {
            line,
            header: &header,
            fields,
        };
        let name_column = source.columns().required[0];
        let name = row.text(name_column)?;
        let biz = BizTag::parse(name).map_err(|e| row.error(name_column, e.to_string()))?;
        let max_id = row.number("max_id")?;
        if max_id < 0 {
            return Err(row.error("max_id", format!("{max_id} is negative")));
        }
        let step = row.number("step")?;
        if step < 1 {
            return Err(row.error("step", format!("{step} is below 1")));
        }
        let (delta, remainder) = match source {
            Source::Tinyid => (row.number("delta")?, row.number("remainder")?),
            Source::Leaf => (1, 0),
        };
        Residue::new(delta, remainder).map_err(|e| row.error("remainder", e.to_string()))?;
        let description = row.get("description").unwrap_or_default().to_string();
        match index.get(&biz).copied() {
            None => {
                index.insert(biz.clone(), imports.len());
                imports.push(Import {
                    biz,
                    max_id,
                    step,
                    within: None,
                    description,
                    line,
                });
                classes.push((delta, vec![remainder]));
            }
            Some(_) if source == Source::Leaf => {
                return Err(row.error(name_column, format!("biz `{biz}` appears twice")));
            }
            Some(k) => {
                let (d, seen) = &mut classes[k];
                if *d != delta {
                    return Err(row.error(
                        "delta",
                        format!(
                            "biz `{biz}` has delta {d} on line {}, {delta} here",
                            imports[k].line
                        ),
                    ));
                }
                if seen.contains(&remainder) {
                    return Err(row.error(
                        "remainder",
                        format!("biz `{biz}` has remainder {remainder} twice"),
                    ));
                }
                seen.push(remainder);
                imports[k].max_id = imports[k].max_id.max(max_id);
                imports[k].step = imports[k].step.max(step);
            }
        }
    }
    for (import, (delta, seen)) in imports.iter_mut().zip(classes) {
        import.within = class_of(import, delta, &seen)?;
    }
    Ok(imports)
}

/// The class a biz's rows issued from together: every ID when their remainders cover
/// all of `0..delta`, the one row's class when there is one row.
fn class_of(import: &Import, delta: i64, seen: &[i64]) -> Result<Option<Residue>, ParseError> {
    if i64::try_from(seen.len()) == Ok(delta) {
        return Ok(None);
    }
    match seen {
        [remainder] => Residue::new(delta, *remainder)
            .map(Some)
            .map_err(|e| ParseError {
                line: import.line,
                column: None,
                message: e.to_string(),
            }),
        _ => Err(ParseError {
            line: import.line,
            column: None,
            message: format!(
                "biz `{}` has rows for remainders {seen:?} of delta {delta}: segmint keeps a biz in one class; export its rows of every Tinyid database (or of one)",
                import.biz
            ),
        }),
    }
}

fn parse_header(source: Source, line: usize, text: &str) -> Result<Vec<String>, ParseError> {
    let columns = source.columns();
    let header: Vec<String> = text.split('\t').map(str::to_ascii_lowercase).collect();
    for (i, name) in header.iter().enumerate() {
        let known = columns.required.contains(&name.as_str())
            || columns.optional.contains(&name.as_str())
            || columns.ignored.contains(&name.as_str());
        let message = if !known {
            format!(
                "unknown column `{name}`; expected the columns of {}",
                match source {
                    Source::Tinyid => "Tinyid's tiny_id_info",
                    Source::Leaf => "Leaf's leaf_alloc",
                }
            )
        } else if header[..i].contains(name) {
            format!("column `{name}` appears twice")
        } else {
            continue;
        };
        return Err(ParseError {
            line,
            column: Some(format!("{} ({name})", i + 1)),
            message,
        });
    }
    if let Some(missing) = columns
        .required
        .iter()
        .find(|c| !header.iter().any(|h| h == *c))
    {
        return Err(ParseError {
            line,
            column: None,
            message: format!(
                "the header lacks column `{missing}` (it needs {}; export with `mysql --batch`, which writes the header)",
                columns.required.join(", ")
            ),
        });
    }
    Ok(header)
}

/// Splits a data line into unescaped fields; `NULL` is `None`.
fn split(line: usize, text: &str) -> Result<Vec<Option<String>>, ParseError> {
    text.split('\t')
        .enumerate()
        .map(|(i, field)| {
            if field == "NULL" {
                return Ok(None);
            }
            let mut out = String::with_capacity(field.len());
            let mut chars = field.chars();
            while let Some(c) = chars.next() {
                if c != '\\' {
                    out.push(c);
                    continue;
                }
                out.push(match chars.next() {
                    Some('\\') => '\\',
                    Some('t') => '\t',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('0') => '\0',
                    other => {
                        return Err(ParseError {
                            line,
                            column: Some((i + 1).to_string()),
                            message: format!(
                                "bad escape `\\{}`; mysql --batch writes only \\\\, \\t, \\n, \\r, \\0",
                                other.map(String::from).unwrap_or_default()
                            ),
                        });
                    }
                });
            }
            Ok(Some(out))
        })
        .collect()
}

/// One database's part of importing one biz.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The biz is missing here: insert this row.
    Create(BizRow),
    /// The row is below the old system's `max_id`: raise it there.
    Raise(BizRow),
    /// The row is already where the import would put it, or above.
    Unchanged(BizRow),
}

/// One database as read for the import.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub name: &'a str,
    /// Its class in the layout in force; `None` when it is not a member of it.
    pub class: Option<Residue>,
    /// Its row of the biz, if it has one.
    pub row: Option<&'a BizRow>,
}

/// What importing `import` means for each of `members`, in order, at layout `epoch`
/// (a row created now belongs to it).
///
/// # Errors
/// When any database refuses the biz, each database's line: why it refuses, or that
/// another database does. The biz is then imported nowhere.
pub fn plan(import: &Import, members: &[Member<'_>], epoch: i64) -> Result<Vec<Plan>, Vec<String>> {
    let plans: Vec<Result<Plan, String>> = members
        .iter()
        .map(|m| match m.class {
            Some(class) => plan_one(import, class, m.row).map(|p| match p {
                Plan::Create(row) => Plan::Create(BizRow { epoch, ..row }),
                other => other,
            }),
            None => Err("the database is not in the layout in force: take it out of the configuration first".into()),
        })
        .collect();
    if !plans.iter().any(Result::is_err) {
        return Ok(plans.into_iter().flatten().collect());
    }
    Err(members
        .iter()
        .zip(plans)
        .map(|(m, plan)| {
            let why = plan
                .err()
                .unwrap_or_else(|| "another database refuses it".into());
            format!(
                "\"{}\": biz `{}`: refused: {why}",
                m.name,
                import.biz.as_str()
            )
        })
        .collect())
}

/// What importing `import` means for one database of class `residue` holding `row`.
fn plan_one(import: &Import, residue: Residue, row: Option<&BizRow>) -> Result<Plan, String> {
    let class = match import.within {
        Some(within) => residue.restrict(within),
        None => Ok(residue),
    }
    .map_err(|e| e.to_string())?;
    if import.step < class.delta() {
        return Err(format!(
            "step {} is smaller than the biz's delta {} here: a segment could hold no ID",
            import.step,
            class.delta()
        ));
    }
    if import.max_id.checked_add(import.step).is_none() {
        return Err(format!(
            "max_id {} + step {} exceeds {}: the biz could not reserve a segment (IDs never wrap)",
            import.max_id,
            import.step,
            i64::MAX
        ));
    }
    let Some(row) = row else {
        return Ok(Plan::Create(BizRow {
            biz_type: import.biz.as_str().into(),
            begin_id: import.max_id,
            max_id: import.max_id,
            step: import.step,
            delta: class.delta(),
            remainder: class.remainder(),
            version: 0,
            description: import.description.as_str().into(),
            epoch: 0,
            frozen: false,
            claimed_by: 0,
        }));
    };
    if (row.delta, row.remainder) != (class.delta(), class.remainder()) {
        return Err(format!(
            "its row has IDs ≡ {} mod {}, the import needs {class}",
            row.remainder, row.delta
        ));
    }
    // A row at or above the file's max_id issues none of the IDs the old system issued
    // (it was imported, then served; or the file is older): it is left as it is, so that
    // a migration script can be run again.
    match row.max_id >= import.max_id {
        true => Ok(Plan::Unchanged(row.clone())),
        false => Ok(Plan::Raise(row.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINYID: &str = "id\tbiz_type\tbegin_id\tmax_id\tstep\tdelta\tremainder\tcreate_time\tupdate_time\tversion\n\
        1\ttest\t1\t2001\t1000\t1\t0\t2017-11-19 00:00:00\t2017-11-19 00:00:00\t3\n\
        2\ttest_odd\t1\t5001\t2000\t2\t1\t2017-11-19 00:00:00\tNULL\t3\n";

    #[test]
    fn tinyid_rows_keep_their_max_id_step_and_class() {
        let rows = parse(Source::Tinyid, TINYID).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].max_id, rows[0].step, rows[0].within),
            (2001, 1000, None)
        );
        assert_eq!(rows[1].within, Some(Residue::new(2, 1).unwrap()));
        assert_eq!(rows[1].line, 3);
    }

    #[test]
    fn rows_of_every_tinyid_database_merge_into_one_unrestricted_biz() {
        let text = "biz_type\tmax_id\tstep\tdelta\tremainder\n\
            order\t100\t10\t2\t0\norder\t130\t20\t2\t1\n";
        let rows = parse(Source::Tinyid, text).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].max_id, rows[0].step, rows[0].within),
            (130, 20, None)
        );
    }

    #[test]
    fn part_of_a_class_split_is_refused() {
        let text = "biz_type\tmax_id\tstep\tdelta\tremainder\n\
            order\t100\t10\t3\t0\norder\t130\t20\t3\t1\n";
        let e = parse(Source::Tinyid, text).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("one class"), "{e}");
    }

    #[test]
    fn leaf_rows_keep_their_description_unescaped() {
        let text = "biz_tag\tmax_id\tstep\tdescription\tupdate_time\n\
            leaf-segment-test\t1\t2000\tTest leaf\\tSegment \\\\ Mode\t2019-01-01 00:00:00\n\
            other\t300\t100\tNULL\t2019-01-01 00:00:00\n";
        let rows = parse(Source::Leaf, text).unwrap();
        assert_eq!(rows[0].description, "Test leaf\tSegment \\ Mode");
        assert_eq!(rows[1].description, "");
        assert_eq!(rows[1].max_id, 300);
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let text = "biz_tag\tmax_id\tstep\na\t1\t10\nb\tlots\t10\n";
        let e = parse(Source::Leaf, text).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3, column 2 (max_id): `lots` is not a whole number in the range of a bigint"
        );
        let e = parse(Source::Leaf, "biz_tag\tmax_id\tstep\na\t1\n").unwrap_err();
        assert_eq!(e.to_string(), "line 2: has 2 fields, the header has 3");
        let e = parse(Source::Leaf, "biz_tag\tmax_id\tstep\tcolour\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 1, column 4 (colour): unknown column"),
            "{e}"
        );
        let e = parse(Source::Tinyid, "biz_type\tmax_id\tstep\n").unwrap_err();
        assert!(e.message.contains("lacks column `delta`"), "{e}");
        let e = parse(Source::Leaf, "biz_tag\tmax_id\tstep\nno space\t1\t10\n").unwrap_err();
        assert_eq!((e.line, e.column.as_deref()), (2, Some("1 (biz_tag)")));
        let e = parse(Source::Leaf, "biz_tag\tmax_id\tstep\na\t1\t0\n").unwrap_err();
        assert!(e.to_string().contains("column 3 (step)"), "{e}");
        let e = parse(Source::Leaf, "biz_tag\tmax_id\tstep\na\\q\t1\t1\n").unwrap_err();
        assert!(e.message.contains("bad escape"), "{e}");
        let e = parse(Source::Leaf, "biz_tag\tmax_id\tstep\na\t1\t1\na\t2\t1\n").unwrap_err();
        assert!(e.message.contains("appears twice"), "{e}");
        assert_eq!(parse(Source::Leaf, "").unwrap_err().line, 1);
    }
}
