//! Request parameters from the query string and a form body.

use std::borrow::Cow;

use actix_web::HttpRequest;
use actix_web::web::Bytes;
use smallvec::SmallVec;

/// Request parameters from the query string and, for POST, a form body, borrowed
/// from the request where no percent-decoding was needed. Decoding never fails:
/// invalid UTF-8 becomes U+FFFD, which no parameter's parser accepts. The few
/// parameters of a request are held inline, without an allocation.
pub(crate) struct Params<'a>(SmallVec<[(Cow<'a, str>, Cow<'a, str>); 4]>);

impl<'a> Params<'a> {
    pub(crate) fn from_query(req: &'a HttpRequest) -> Params<'a> {
        Params(text_pairs(req.query_string()).collect())
    }

    pub(crate) fn from_request(req: &'a HttpRequest, body: &'a Bytes) -> Params<'a> {
        let mut params = Self::from_query(req);
        let form = req
            .headers()
            .get(actix_web::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if form {
            params.extend_form(body);
        }
        params
    }

    /// Adds the pairs of form-encoded `input`.
    pub(crate) fn extend_form(&mut self, input: &'a [u8]) {
        match std::str::from_utf8(input) {
            Ok(text) => self.0.extend(text_pairs(text)),
            Err(_) => self.0.extend(form_urlencoded::parse(input)),
        }
    }

    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_ref())
    }
}

/// The `name=value` pairs of `application/x-www-form-urlencoded` text, exactly as
/// `form_urlencoded::parse` decodes them. A pair without `%` or `+` (every pair a
/// client sends for a token, a biz and a count) is split in place, in one pass; only
/// the others go through percent-decoding and the lossy UTF-8 conversion.
pub(crate) fn text_pairs(text: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    text.split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let mut eq = None;
            for (i, b) in piece.bytes().enumerate() {
                match b {
                    b'%' | b'+' => {
                        return form_urlencoded::parse(piece.as_bytes())
                            .next()
                            .unwrap_or_default();
                    }
                    b'=' if eq.is_none() => eq = Some(i),
                    _ => {}
                }
            }
            // `=` is ASCII: splitting there keeps both sides whole characters.
            let (name, value) = match eq {
                Some(i) => (&piece[..i], &piece[i + 1..]),
                None => (piece, ""),
            };
            (Cow::Borrowed(name), Cow::Borrowed(value))
        })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;

    use super::Params;

    /// Bytes drawn mostly from what separates and encodes pairs.
    pub(crate) fn form_input() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                4 => proptest::sample::select(b"&=%+a1F".to_vec()),
                1 => any::<u8>(),
            ],
            0..40,
        )
    }

    pub(crate) fn form(input: &[u8]) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
        let mut params = Params(Default::default());
        params.extend_form(input);
        params.0.into_vec()
    }

    proptest! {
        #[test]
        fn pairs_decode_as_form_urlencoded_does(input in form_input()) {
            let reference: Vec<_> = form_urlencoded::parse(&input).collect();
            prop_assert_eq!(form(&input), reference);
        }
    }

    #[test]
    pub(crate) fn plain_pairs_are_borrowed_and_encoded_ones_decoded() {
        let input = b"bizType=order&token=abc&&batchSize&x=a%20b+c&y=%FF&z=\xc3\xa9=1";
        let got = form(input);
        assert_eq!(
            got,
            [
                ("bizType".into(), "order".into()),
                ("token".into(), "abc".into()),
                ("batchSize".into(), "".into()),
                ("x".into(), "a b c".into()),
                ("y".into(), "\u{FFFD}".into()),
                ("z".into(), "\u{e9}=1".into()),
            ]
        );
        assert!(matches!(got[1].1, Cow::Borrowed(_)));
        assert!(matches!(got[5].1, Cow::Borrowed(_)));
        // Input that is not UTF-8 is decoded as a whole, each pair lossily.
        assert_eq!(
            form(b"a=\xff&b=2"),
            [("a".into(), "\u{FFFD}".into()), ("b".into(), "2".into())]
        );
    }
}
