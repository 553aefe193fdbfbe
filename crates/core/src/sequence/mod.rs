//! Sequences that only go up: per-key counters whose every answer is greater than every
//! answer before it for the same key, by any server, after any failure (WeChat seqsvr's
//! class of number, for chat messages, ledgers and feeds).
//!
//! A sequence biz's keys are grouped in sections ([`section_of`]). Each section has
//! one row per database holding its persisted upper bound (the highest number any
//! owner may have answered) and a lease: one server at a time owns a section, answers
//! its keys from memory, and raises the bound a step at a time. Owning and raising are
//! one protocol, [`claim::Claim`]: read the section's row on every database, then write
//! it back by compare-and-set on each, and count a majority. The store carries out its
//! reads and writes on the engines; the model checker carries them out on simulated
//! databases, crashes, pauses and restores.
//!
//! Around the claim, machines that say when to claim, each taking the time as input:
//! [`holder::Section`] (a server's part in one section: answering from memory, taking,
//! raising, renewing, releasing), [`presence::Presence`] (which servers take part, and
//! [`presence::assign`]ment of sections over them), and [`carry::Carry`] (a layout
//! change carrying a section's bound to the new members).

pub mod carry;
pub mod claim;
pub mod counters;
pub mod holder;
pub mod presence;

/// The longest key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 255;

/// The most numbers one request may take for one key (`count`), and the most keys one
/// request may increment.
pub const MAX_COUNT: i64 = 10_000;

/// Sections a sequence biz has unless it says otherwise.
pub const DEFAULT_SECTIONS: u32 = 64;

/// The most sections a sequence biz may have.
pub const MAX_SECTIONS: u32 = 4_096;

/// Why a key is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a key is 1 to {MAX_KEY_BYTES} bytes of UTF-8")]
    Length,
    #[error("a key holds no control characters")]
    Control,
}

/// Checks a key: 1 to [`MAX_KEY_BYTES`] bytes, no control characters. Integers are keys
/// written in decimal.
///
/// # Errors
/// [`KeyError`] saying which rule the key breaks.
pub fn check_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(KeyError::Length);
    }
    if key.chars().any(char::is_control) {
        return Err(KeyError::Control);
    }
    Ok(())
}

/// A key's 64-bit hash: FNV-1a, then a finalizer that spreads its bits. Stable across
/// processes, versions and machines, as every server must agree on a key's section.
pub fn key_hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // The finalizer of MurmurHash3's 64-bit mix.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The section (below `sections`) of a key whose hash is `hash`.
pub fn section_of(hash: u64, sections: u32) -> u32 {
    assert!(sections > 0, "a sequence biz has a section at least");
    // Lemire's reduction: the high bits of hash × sections, even over any count.
    ((u128::from(hash) * u128::from(sections)) >> 64) as u32
}

/// The smallest number of `members` databases that any two such sets share one of.
pub fn majority(members: usize) -> usize {
    members / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(check_key("msg_seq:42").is_ok());
        assert!(check_key(&"é".repeat(127)).is_ok());
        assert_eq!(check_key(""), Err(KeyError::Length));
        assert_eq!(check_key(&"x".repeat(256)), Err(KeyError::Length));
        assert_eq!(check_key("a\nb"), Err(KeyError::Control));
    }

    #[test]
    fn a_keys_section_is_stable_and_sections_fill_evenly() {
        // Fixed values: a change would move every key to another section, and with it
        // its bound (numbers could go back).
        assert_eq!(key_hash("chat:1"), 0x508f_02cf_0cfa_e0d7);
        assert_eq!(key_hash(""), 0xefd0_1f60_ba99_2926);
        assert_eq!(section_of(0x508f_02cf_0cfa_e0d7, 64), 20);
        let mut counts = vec![0u32; 64];
        for k in 0..64_000 {
            counts[section_of(key_hash(&k.to_string()), 64) as usize] += 1;
        }
        let (lo, hi) = (counts.iter().min(), counts.iter().max());
        assert!(
            lo.is_some_and(|&n| n > 800) && hi.is_some_and(|&n| n < 1_200),
            "{counts:?}"
        );
        assert_eq!(section_of(u64::MAX, 7), 6);
        assert_eq!(section_of(0, 7), 0);
    }

    #[test]
    fn a_majority_overlaps_any_other() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }
}
