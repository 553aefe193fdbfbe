//! How a biz's IDs are written for people: an optional prefix, digits in base 10, 36 or
//! 62 zero-padded to a fixed width, and an optional check character (Damm's algorithm
//! in base 10, Luhn mod N in bases 36 and 62) that catches a mistyped character.
//! Encoding is a bijection: [`Format::decode`] gives back the number.
//!
//! A pattern (`ORD{yyyy}{MM}{dd}{seq:06}`) places date fields beside the counter, for
//! a biz whose counter restarts each period ([`super::period`]): the number is then the
//! period's code times the counter's modulus plus the counter, and the fields write
//! both.

use super::period::Reset;

/// Characters a prefix may hold.
fn prefix_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Digits of base 62, in order; bases 10 and 36 use its first 10 and, for 36, the
/// lower-case letters.
const DIGITS_62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const DIGITS_36: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// Damm's table: a totally anti-symmetric quasigroup of order 10.
const DAMM: [[u8; 10]; 10] = [
    [0, 3, 1, 7, 5, 9, 8, 6, 4, 2],
    [7, 0, 9, 2, 1, 5, 4, 8, 6, 3],
    [4, 2, 0, 6, 8, 7, 1, 3, 5, 9],
    [1, 7, 5, 0, 9, 8, 3, 4, 2, 6],
    [6, 1, 2, 3, 0, 4, 5, 9, 7, 8],
    [3, 6, 7, 4, 2, 0, 9, 5, 8, 1],
    [5, 8, 6, 9, 7, 2, 0, 1, 3, 4],
    [8, 9, 4, 5, 3, 6, 2, 0, 1, 7],
    [9, 4, 3, 8, 6, 1, 7, 2, 0, 5],
    [2, 5, 8, 1, 4, 3, 6, 7, 9, 0],
];

/// The base of the digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    Ten,
    /// `0-9a-z`.
    ThirtySix,
    /// `0-9A-Za-z`.
    SixtyTwo,
}

impl Base {
    /// The base for `10`, `36` or `62`.
    pub fn from_radix(radix: u32) -> Option<Base> {
        match radix {
            10 => Some(Base::Ten),
            36 => Some(Base::ThirtySix),
            62 => Some(Base::SixtyTwo),
            _ => None,
        }
    }

    pub fn radix(self) -> u32 {
        match self {
            Base::Ten => 10,
            Base::ThirtySix => 36,
            Base::SixtyTwo => 62,
        }
    }

    fn digits(self) -> &'static [u8] {
        match self {
            Base::Ten => &DIGITS_62[..10],
            Base::ThirtySix => DIGITS_36,
            Base::SixtyTwo => DIGITS_62,
        }
    }

    /// The value of the digit `c`, if it is one of this base.
    fn value(self, c: u8) -> Option<u32> {
        let v = match (self, c) {
            (_, b'0'..=b'9') => c - b'0',
            (Base::ThirtySix, b'a'..=b'z') => c - b'a' + 10,
            (Base::SixtyTwo, b'A'..=b'Z') => c - b'A' + 10,
            (Base::SixtyTwo, b'a'..=b'z') => c - b'a' + 36,
            _ => return None,
        };
        Some(u32::from(v))
    }
}

/// Why a format or a formatted ID was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("a prefix holds 1 to 16 letters, digits, '_' or '-', got `{0}`")]
    Prefix(String),
    #[error("width must be 1 to 64 characters, got {0}")]
    Width(u32),
    #[error("ID {id} needs {needed} digits in base {base}, more than the width {width}")]
    TooWide {
        id: i64,
        needed: usize,
        base: u32,
        width: usize,
    },
    #[error("a formatted ID is never negative, got {0}")]
    Negative(i64),
    #[error("`{0}` is not an ID of this format: {1}")]
    Malformed(String, &'static str),
    #[error("pattern `{0}`: {1}")]
    Pattern(String, &'static str),
    #[error("ID {0} holds no date of its period: it was never issued in this format")]
    NoPeriod(i64),
}

/// One piece of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// Characters written as they are: `from..to` of the pattern's text.
    Text(usize, usize),
    Year,
    Month,
    Day,
    /// The counter: `width` digits of the base.
    Seq,
}

/// A parsed pattern: its text and pieces, and the period its date fields name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    text: String,
    pieces: Vec<Piece>,
    reset: Reset,
    /// The counter's base to the power of its width.
    modulus: i64,
}

/// A biz's format; the default writes a plain decimal number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    prefix: String,
    /// Digits, zero-padded; 0: as many as the number needs.
    width: usize,
    base: Base,
    /// Whether a check character follows the digits.
    check: bool,
    /// Date fields around the counter, for a biz whose counter restarts each period.
    pattern: Option<Pattern>,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            prefix: String::new(),
            width: 0,
            base: Base::Ten,
            check: false,
            pattern: None,
        }
    }
}

impl Format {
    /// A format; `width` 0 pads nothing.
    ///
    /// # Errors
    /// [`FormatError`] for a prefix or width outside what is allowed.
    pub fn new(prefix: &str, width: u32, base: Base, check: bool) -> Result<Format, FormatError> {
        if prefix.len() > 16 || !prefix.chars().all(prefix_char) {
            return Err(FormatError::Prefix(prefix.chars().take(32).collect()));
        }
        if width > 64 {
            return Err(FormatError::Width(width));
        }
        Ok(Format {
            prefix: prefix.to_owned(),
            width: width as usize,
            base,
            check,
            pattern: None,
        })
    }

    /// A format written by `pattern`: characters a prefix may hold, the date fields
    /// `{yyyy}`, `{MM}` and `{dd}`, and the counter `{seq:0N}` (`N` digits of `base`),
    /// e.g. `ORD{yyyy}{MM}{dd}{seq:06}`. The fields name the period: `{dd}` a day
    /// (with `{yyyy}` and `{MM}`), `{MM}` a month (with `{yyyy}`), `{yyyy}` alone a
    /// year; the counter is written once. A check character, if any, follows
    /// everything, computed over the fields.
    ///
    /// # Errors
    /// [`FormatError::Pattern`] saying what is wrong.
    pub fn with_pattern(pattern: &str, base: Base, check: bool) -> Result<Format, FormatError> {
        let bad = |why| FormatError::Pattern(pattern.chars().take(80).collect(), why);
        if pattern.len() > 64 {
            return Err(bad("it is longer than 64 characters"));
        }
        let mut pieces = Vec::new();
        let mut width = 0usize;
        let mut rest = pattern;
        let mut at = 0;
        while !rest.is_empty() {
            if let Some(field) = rest.strip_prefix('{') {
                let end = field.find('}').ok_or_else(|| bad("a `{` is not closed"))?;
                let piece = match &field[..end] {
                    "yyyy" => Piece::Year,
                    "MM" => Piece::Month,
                    "dd" => Piece::Day,
                    seq => {
                        let digits = seq
                            .strip_prefix("seq:0")
                            .ok_or_else(|| bad("fields are {yyyy}, {MM}, {dd} and {seq:0N}"))?;
                        width = digits
                            .parse::<usize>()
                            .ok()
                            .filter(|w| (1..=18).contains(w))
                            .ok_or_else(|| bad("{seq:0N} needs N from 1 to 18"))?;
                        Piece::Seq
                    }
                };
                if pieces.contains(&piece) {
                    return Err(bad("a field is written twice"));
                }
                pieces.push(piece);
                at += end + 2;
                rest = &field[end + 1..];
            } else {
                let len = rest.find('{').unwrap_or(rest.len());
                if !rest[..len].chars().all(prefix_char) {
                    return Err(bad(
                        "text between fields holds letters, digits, '_' or '-' only",
                    ));
                }
                pieces.push(Piece::Text(at, at + len));
                at += len;
                rest = &rest[len..];
            }
        }
        let has = |p| pieces.contains(&p);
        if !has(Piece::Seq) {
            return Err(bad("it has no {seq:0N}"));
        }
        let reset = match (has(Piece::Year), has(Piece::Month), has(Piece::Day)) {
            (true, true, true) => Reset::Daily,
            (true, true, false) => Reset::Monthly,
            (true, false, false) => Reset::Yearly,
            _ => {
                return Err(bad(
                    "date fields name a period: {yyyy}{MM}{dd}, {yyyy}{MM} or {yyyy}",
                ));
            }
        };
        let modulus = i64::from(base.radix())
            .checked_pow(width as u32)
            .ok_or_else(|| bad("{seq} is too wide for a 63-bit ID"))?;
        Ok(Format {
            prefix: String::new(),
            width,
            base,
            check,
            pattern: Some(Pattern {
                text: pattern.to_owned(),
                pieces,
                reset,
                modulus,
            }),
        })
    }

    /// The pattern this format was written with, if any.
    pub fn pattern(&self) -> Option<&str> {
        self.pattern.as_ref().map(|p| p.text.as_str())
    }

    /// The period the pattern's date fields name, and the counter's modulus.
    pub fn period(&self) -> Option<(Reset, i64)> {
        self.pattern.as_ref().map(|p| (p.reset, p.modulus))
    }

    /// Whether IDs are written as plain decimal numbers (no prefix, padding, base or
    /// check character).
    pub fn is_plain(&self) -> bool {
        *self == Format::default()
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn base(&self) -> Base {
        self.base
    }

    pub fn check(&self) -> bool {
        self.check
    }

    /// `id` written in this format.
    ///
    /// # Errors
    /// [`FormatError::TooWide`] when `id` needs more digits than the width (never
    /// cut), [`FormatError::Negative`] for a negative `id`.
    pub fn encode(&self, id: i64) -> Result<String, FormatError> {
        if let Some(p) = &self.pattern {
            return self.encode_pattern(p, id);
        }
        let mut n = u64::try_from(id).map_err(|_| FormatError::Negative(id))?;
        let radix = u64::from(self.base.radix());
        let digits = self.base.digits();
        let mut buf = [0u8; 64];
        let mut at = buf.len();
        loop {
            at -= 1;
            buf[at] = digits[(n % radix) as usize];
            n /= radix;
            if n == 0 {
                break;
            }
        }
        let needed = buf.len() - at;
        if self.width > 0 && needed > self.width {
            return Err(FormatError::TooWide {
                id,
                needed,
                base: self.base.radix(),
                width: self.width,
            });
        }
        let mut out = String::with_capacity(self.prefix.len() + self.width.max(needed) + 1);
        out.push_str(&self.prefix);
        for _ in needed..self.width {
            out.push('0');
        }
        // The buffer holds ASCII digits only.
        out.push_str(std::str::from_utf8(&buf[at..]).unwrap_or_default());
        if self.check {
            let body = &out.as_bytes()[self.prefix.len()..];
            out.push(char::from(digits[self.check_value(body) as usize]));
        }
        Ok(out)
    }

    /// `id` written by pattern `p`: its period's date and its counter.
    fn encode_pattern(&self, p: &Pattern, id: i64) -> Result<String, FormatError> {
        use std::fmt::Write;
        if id < 0 {
            return Err(FormatError::Negative(id));
        }
        let (code, counter) = (id / p.modulus, id % p.modulus);
        let day = p.reset.first_day(code).ok_or(FormatError::NoPeriod(id))?;
        let digits = self.counter_format().encode(counter)?;
        let mut out = String::with_capacity(p.text.len() + self.width + 9);
        // The fields' characters, over which the check character is computed.
        let mut body = String::new();
        for piece in &p.pieces {
            let at = out.len();
            // Writing to a String cannot fail.
            let _ = match *piece {
                Piece::Text(from, to) => {
                    out.push_str(&p.text[from..to]);
                    continue;
                }
                Piece::Year => write!(out, "{:04}", day.year()),
                Piece::Month => write!(out, "{:02}", day.month()),
                Piece::Day => write!(out, "{:02}", day.day()),
                Piece::Seq => {
                    out.push_str(&digits);
                    Ok(())
                }
            };
            if self.check {
                body.push_str(&out[at..]);
            }
        }
        if self.check {
            out.push(char::from(
                self.base.digits()[self.check_value(body.as_bytes()) as usize],
            ));
        }
        Ok(out)
    }

    /// The pattern's counter alone: its width of digits in its base.
    fn counter_format(&self) -> Format {
        Format {
            prefix: String::new(),
            width: self.width,
            base: self.base,
            check: false,
            pattern: None,
        }
    }

    /// The ID `text` stands for, written by pattern `p`.
    fn decode_pattern(&self, p: &Pattern, text: &str) -> Result<i64, FormatError> {
        let bad = |why| FormatError::Malformed(text.chars().take(80).collect(), why);
        let mut rest = text;
        let mut body = String::new();
        let (mut year, mut month, mut day, mut counter) = (0i64, 1i64, 1i64, 0i64);
        for piece in &p.pieces {
            let len = match *piece {
                Piece::Text(from, to) => {
                    rest = rest
                        .strip_prefix(&p.text[from..to])
                        .ok_or_else(|| bad("its text around the fields differs"))?;
                    continue;
                }
                Piece::Year => 4,
                Piece::Month | Piece::Day => 2,
                Piece::Seq => self.width,
            };
            let field = rest
                .get(..len)
                .ok_or_else(|| bad("it has the wrong number of characters"))?;
            rest = &rest[len..];
            body.push_str(field);
            if *piece == Piece::Seq {
                counter = self
                    .counter_format()
                    .decode(field)
                    .map_err(|_| bad("its counter has a character outside the base"))?;
            } else {
                let n = field
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| field.parse::<i64>().ok())
                    .flatten()
                    .ok_or_else(|| bad("a date field has a character other than a digit"))?;
                match piece {
                    Piece::Year => year = n,
                    Piece::Month => month = n,
                    _ => day = n,
                }
            }
        }
        if self.check {
            let mut chars = rest.bytes();
            let expected = self.base.digits()[self.check_value(body.as_bytes()) as usize];
            if chars.next() != Some(expected) {
                return Err(bad(
                    "its check character is wrong: a character was mistyped",
                ));
            }
            rest = &rest[1..];
        }
        if !rest.is_empty() {
            return Err(bad("it has characters after the last field"));
        }
        let code = match p.reset {
            Reset::Daily => year * 10_000 + month * 100 + day,
            Reset::Monthly => year * 100 + month,
            Reset::Yearly => year,
        };
        if p.reset.first_day(code).is_none() {
            return Err(bad("its date is not a date"));
        }
        Ok(code * p.modulus + counter)
    }

    /// The ID `text` stands for.
    ///
    /// # Errors
    /// [`FormatError::Malformed`] when `text` lacks the prefix, has characters outside
    /// the base, the wrong width, a wrong check character, or is out of range.
    pub fn decode(&self, text: &str) -> Result<i64, FormatError> {
        if let Some(p) = &self.pattern {
            return self.decode_pattern(p, text);
        }
        let bad = |why| FormatError::Malformed(text.chars().take(80).collect(), why);
        let body = text
            .strip_prefix(self.prefix.as_str())
            .ok_or_else(|| bad("it lacks the prefix"))?
            .as_bytes();
        let digits = match (self.check, body.split_last()) {
            (false, _) => body,
            (true, Some((&check, digits))) => {
                let expected = self.base.digits()[self.check_value(digits) as usize];
                if check != expected {
                    return Err(bad(
                        "its check character is wrong: a character was mistyped",
                    ));
                }
                digits
            }
            (true, None) => return Err(bad("it is empty")),
        };
        if digits.is_empty() {
            return Err(bad("it has no digits"));
        }
        if self.width > 0 && digits.len() != self.width {
            return Err(bad("it has the wrong number of digits"));
        }
        let radix = u64::from(self.base.radix());
        let mut n: u64 = 0;
        for &c in digits {
            let v = self
                .base
                .value(c)
                .ok_or_else(|| bad("it has a character outside the base"))?;
            n = n
                .checked_mul(radix)
                .and_then(|n| n.checked_add(u64::from(v)))
                .ok_or_else(|| bad("it is beyond the largest ID"))?;
        }
        i64::try_from(n).map_err(|_| bad("it is beyond the largest ID"))
    }

    /// The check value of `digits` (ASCII digits of the base): Damm in base 10 (every
    /// single-digit error and every adjacent transposition), Luhn mod N otherwise.
    fn check_value(&self, digits: &[u8]) -> u32 {
        match self.base {
            Base::Ten => u32::from(digits.iter().fold(0u8, |interim, &c| {
                DAMM[interim as usize][(c - b'0') as usize]
            })),
            base => {
                let n = base.radix();
                let mut sum = 0;
                // From the right, the rightmost digit doubled (the check character,
                // appended after it, is then the undoubled one).
                for (i, &c) in digits.iter().rev().enumerate() {
                    let v = base.value(c).unwrap_or(0);
                    let addend = if i % 2 == 0 { 2 * v } else { v };
                    sum += addend / n + addend % n;
                }
                (n - sum % n) % n
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn all_bases() -> [Base; 3] {
        [Base::Ten, Base::ThirtySix, Base::SixtyTwo]
    }

    #[test]
    fn writes_the_documented_shapes() {
        let sms = Format::new("sms_", 12, Base::Ten, false).unwrap();
        assert_eq!(sms.encode(108678123).unwrap(), "sms_000108678123");
        assert_eq!(sms.decode("sms_000108678123"), Ok(108678123));
        let short = Format::new("", 0, Base::SixtyTwo, false).unwrap();
        assert_eq!(short.encode(61).unwrap(), "z");
        assert_eq!(short.encode(62).unwrap(), "10");
        assert_eq!(Format::default().encode(42).unwrap(), "42");
        assert!(Format::default().is_plain());
        let e = sms.encode(1_000_000_000_000).unwrap_err();
        assert!(matches!(e, FormatError::TooWide { needed: 13, .. }), "{e}");
    }

    #[test]
    fn bad_prefixes_and_widths_are_refused() {
        for prefix in ["a b", "é", "x/y", "seventeen_chars__"] {
            assert!(
                Format::new(prefix, 0, Base::Ten, false).is_err(),
                "{prefix}"
            );
        }
        assert!(Format::new("ok", 65, Base::Ten, false).is_err());
    }

    #[test]
    fn malformed_text_is_refused() {
        let f = Format::new("o-", 6, Base::ThirtySix, true).unwrap();
        let good = f.encode(12345).unwrap();
        assert_eq!(f.decode(&good), Ok(12345));
        for bad in [
            "",
            "o-",
            "x-000abc1",
            "o-00!9ix0",
            &good[..good.len() - 1],
            &format!("{good}0"),
        ] {
            assert!(f.decode(bad).is_err(), "{bad}");
        }
        let plain = Format::default();
        assert!(plain.decode("99999999999999999999").is_err());
        assert!(plain.decode("-1").is_err());
    }

    /// Every single-character substitution and every adjacent transposition of every
    /// two-digit body is caught by Damm's check digit; Luhn mod N catches every
    /// substitution and every transposition but of the characters worth 0 and N − 1.
    #[test]
    fn check_characters_catch_what_they_claim() {
        for base in all_bases() {
            let f = Format::new("", 2, base, true).unwrap();
            let n = base.radix() as usize;
            let digits = base.digits();
            let mut missed_swaps = Vec::new();
            for a in 0..n {
                for b in 0..n {
                    let text = f.encode((a * n + b) as i64).unwrap();
                    let bytes = text.as_bytes().to_vec();
                    for at in 0..3 {
                        for &c in digits {
                            if c != bytes[at] {
                                let mut typo = bytes.clone();
                                typo[at] = c;
                                let typo = String::from_utf8(typo).unwrap();
                                assert!(f.decode(&typo).is_err(), "{base:?}: {text} → {typo}");
                            }
                        }
                    }
                    for at in 0..2 {
                        if bytes[at] != bytes[at + 1] {
                            let mut swapped = bytes.clone();
                            swapped.swap(at, at + 1);
                            let swapped = String::from_utf8(swapped).unwrap();
                            if f.decode(&swapped).is_ok() {
                                missed_swaps.push((bytes[at], bytes[at + 1]));
                            }
                        }
                    }
                }
            }
            let last = digits[n - 1];
            match base {
                Base::Ten => assert!(missed_swaps.is_empty(), "{missed_swaps:?}"),
                _ => assert!(
                    missed_swaps
                        .iter()
                        .all(|&(x, y)| (x, y) == (b'0', last) || (x, y) == (last, b'0')),
                    "{base:?}: {:?}",
                    missed_swaps
                        .iter()
                        .map(|&(x, y)| format!("{}{}", x as char, y as char))
                        .collect::<Vec<_>>()
                ),
            }
        }
    }

    #[test]
    fn patterns_write_the_date_and_the_counter() {
        let f = Format::with_pattern("ORD{yyyy}{MM}{dd}{seq:06}", Base::Ten, false).unwrap();
        assert_eq!(f.period(), Some((Reset::Daily, 1_000_000)));
        assert_eq!(f.encode(20261125000123).unwrap(), "ORD20261125000123");
        assert_eq!(f.decode("ORD20261125000123"), Ok(20261125000123));
        let m = Format::with_pattern("INV-{seq:05}-{MM}{yyyy}", Base::ThirtySix, true).unwrap();
        assert_eq!(m.period(), Some((Reset::Monthly, 36_i64.pow(5))));
        let id = 202611 * 36_i64.pow(5) + 12345;
        let text = m.encode(id).unwrap();
        assert!(text.starts_with("INV-009ix-112026"), "{text}");
        assert_eq!(m.decode(&text), Ok(id));
        assert!(matches!(
            f.encode(20261132000001),
            Err(FormatError::NoPeriod(_))
        ));
        for bad in [
            "ORD20261125",
            "ORD2026112500012",
            "ORD202611250001234",
            "ORX20261125000123",
            "ORD20261131000123",
            "ORD2026a125000123",
        ] {
            assert!(f.decode(bad).is_err(), "{bad}");
        }
        let wrong = m.encode(id).unwrap().replace("ix", "xi");
        assert!(m.decode(&wrong).is_err());
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in [
            "ORD{yyyy}{MM}{dd}",
            "{MM}{dd}{seq:04}",
            "{yyyy}{dd}{seq:04}",
            "{yyyy}{seq:4}",
            "{yyyy}{seq:00}",
            "{yyyy}{seq:019}",
            "{yyyy}{yyyy}{seq:04}",
            "{yyyy}{seq:04",
            "a b{yyyy}{seq:04}",
            "{yy}{seq:04}",
        ] {
            assert!(
                Format::with_pattern(bad, Base::Ten, false).is_err(),
                "{bad}"
            );
        }
        assert!(Format::with_pattern("{yyyy}{seq:12}", Base::SixtyTwo, false).is_err());
    }

    proptest! {
        #[test]
        fn patterns_round_trip(
            day in 0i64..2_900_000,
            counter in 0i64..1_000_000,
            radix in prop::sample::select(vec![10u32, 36, 62]),
            check in any::<bool>(),
        ) {
            let base = Base::from_radix(radix).unwrap();
            let f = Format::with_pattern("X-{yyyy}{MM}{dd}-{seq:04}", base, check).unwrap();
            let (_, modulus) = f.period().unwrap();
            let date = jiff::civil::Date::constant(1970, 1, 1)
                .checked_add(jiff::Span::new().days(day))
                .unwrap();
            let code = i64::from(date.year()) * 10_000 + i64::from(date.month()) * 100 + i64::from(date.day());
            let id = code * modulus + counter % modulus;
            let text = f.encode(id).unwrap();
            prop_assert_eq!(f.decode(&text), Ok(id));
        }

        #[test]
        fn formats_round_trip(
            id in 0i64..=i64::MAX,
            prefix in "[A-Za-z0-9_-]{0,16}",
            radix in prop::sample::select(vec![10u32, 36, 62]),
            check in any::<bool>(),
        ) {
            let base = Base::from_radix(radix).unwrap();
            let f = Format::new(&prefix, 0, base, check).unwrap();
            let text = f.encode(id).unwrap();
            prop_assert!(text.starts_with(&prefix));
            prop_assert_eq!(f.decode(&text), Ok(id));
            let padded = Format::new(&prefix, 64, base, check).unwrap();
            let text = padded.encode(id).unwrap();
            prop_assert_eq!(padded.decode(&text), Ok(id));
        }
    }
}
