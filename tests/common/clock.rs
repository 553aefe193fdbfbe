//! A server's wall clock shifted with libfaketime (Debian's `faketime`, installed by
//! `scripts/test`): snowflake clock guards and periods that restart at midnight are
//! tested on real processes whose clocks the test steps.

use std::path::{Path, PathBuf};

use super::ServerProcess;

/// libfaketime's library; panics naming the package when it is missing.
pub fn faketime_lib() -> PathBuf {
    let lib = PathBuf::from(format!(
        "/usr/lib/{}-linux-gnu/faketime/libfaketime.so.1",
        std::env::consts::ARCH
    ));
    assert!(
        lib.exists(),
        "{} is missing: install Debian's faketime (scripts/test does)",
        lib.display()
    );
    lib
}

/// A server whose wall clock is shifted: by the offset in a file the test rewrites
/// (`+0`, `-0.004`, `-3` seconds), or by a fixed offset read once at start. Its
/// monotonic clock stays true, so timers work.
pub struct ShiftedClock {
    offset: Offset,
}

enum Offset {
    /// Read again at every reading of the clock (`FAKETIME_NO_CACHE`).
    File(tempfile::NamedTempFile),
    /// `FAKETIME` itself. A file read at every reading of the clock is not read
    /// atomically: under load from many threads, a reading now and then came back
    /// unshifted (seen as IDs of the true date from a server 81 days behind).
    Fixed(String),
}

impl ShiftedClock {
    pub fn new(offset: &str) -> ShiftedClock {
        let clock = ShiftedClock {
            offset: Offset::File(tempfile::NamedTempFile::new().unwrap()),
        };
        clock.set(offset);
        clock
    }

    /// A clock `seconds` ahead of the true one (behind when negative), for good.
    pub fn ahead(seconds: f64) -> ShiftedClock {
        ShiftedClock {
            offset: Offset::Fixed(format!("{seconds:+.3}")),
        }
    }

    /// Shifts a clock made by [`ShiftedClock::new`] to `offset`.
    pub fn set(&self, offset: &str) {
        match &self.offset {
            Offset::File(file) => std::fs::write(file.path(), format!("{offset}\n")).unwrap(),
            Offset::Fixed(_) => panic!("a fixed offset cannot be set again"),
        }
    }

    /// The environment that puts a process on this clock, with libfaketime at `lib`.
    pub fn env(&self, lib: &Path) -> Vec<(String, String)> {
        let mut env = vec![
            ("LD_PRELOAD".into(), lib.display().to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ];
        match &self.offset {
            Offset::File(file) => {
                env.push((
                    "FAKETIME_TIMESTAMP_FILE".into(),
                    file.path().display().to_string(),
                ));
                env.push(("FAKETIME_NO_CACHE".into(), "1".into()));
            }
            Offset::Fixed(offset) => env.push(("FAKETIME".into(), offset.clone())),
        }
        env
    }

    /// `segmint serve` with the configuration `toml` on this clock.
    pub async fn server(&self, toml: &str) -> ServerProcess {
        let env = self.env(&faketime_lib());
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        ServerProcess::start_with_env(toml, &env).await
    }
}

/// A fixed-offset zone whose time of day is now about noon, and its hours ahead of
/// UTC: a test of a daily counter in it stays within one day however long it runs.
pub fn noon_zone() -> (String, i64) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let hour = now_ms.div_euclid(3_600_000).rem_euclid(24);
    let ahead = 12 - hour;
    // `Etc/GMT-N` is N hours ahead of UTC (POSIX's inverted sign).
    let zone = match ahead {
        0 => "UTC".to_owned(),
        n if n > 0 => format!("Etc/GMT-{n}"),
        n => format!("Etc/GMT+{}", -n),
    };
    (zone, ahead)
}
