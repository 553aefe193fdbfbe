//! Ending a `segmint serve` process: a crash (SIGKILL) or a graceful stop (SIGTERM)
//! within a bound, and the end of its log to explain a failure.

use std::process::ExitStatus;
use std::time::Duration;

use super::ServerProcess;

/// How much of the log's end [`ServerProcess::log_tail`] shows: enough for the last
/// errors without burying the assertion's message.
const TAIL_BYTES: usize = 4000;

impl ServerProcess {
    /// The last [`TAIL_BYTES`] of the log, under a line naming the file.
    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let skip = text.len().saturating_sub(TAIL_BYTES);
        let start = (skip..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        format!("--- {} (tail) ---\n{}", self.log.display(), &text[start..])
    }

    /// SIGKILL, as a crash would; waits for the process to be gone.
    pub fn kill9(&mut self) {
        self.child.kill9();
    }

    /// SIGTERM; the exit status, which must come within `limit`.
    pub async fn sigterm(&mut self, limit: Duration) -> ExitStatus {
        match self.terminate_within(limit).await {
            Some((_, status)) => status,
            None => panic!(
                "segmint serve did not exit within {limit:?} of SIGTERM:\n{}",
                self.log_tail()
            ),
        }
    }
}
