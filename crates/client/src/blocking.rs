//! The client for code without an async runtime: the same cache, and a runtime of
//! its own for the background fetches.
//!
//! ```no_run
//! use segmint_client::blocking::BlockingClient;
//! let client = BlockingClient::builder()
//!     .servers(["http://127.0.0.1:9999"])
//!     .token("3f9a…")
//!     .build()
//!     .unwrap();
//! let orders = client.biz("order").unwrap();
//! let id = orders.next_id().unwrap();
//! ```

use super::{Biz, BizStats, Client, ClientBuilder, ClientError, CloseSummary, ErrorKind};

/// A [`Client`] that blocks instead of awaiting. Do not call it from async code:
/// waiting for a segment blocks the thread.
pub struct BlockingClient {
    client: Client,
    /// Runs the background fetches; dropped (and stopped) with the client.
    runtime: tokio::runtime::Runtime,
}

/// Settings of a [`BlockingClient`]: those of [`ClientBuilder`].
pub struct BlockingClientBuilder(ClientBuilder);

impl BlockingClient {
    pub fn builder() -> BlockingClientBuilder {
        BlockingClientBuilder(ClientBuilder::default())
    }

    /// The handle of `biz`.
    ///
    /// # Errors
    /// As [`Client::biz`].
    pub fn biz(&self, biz: &str) -> Result<BlockingBiz, ClientError> {
        Ok(BlockingBiz {
            biz: self.client.biz(biz)?,
            runtime: self.runtime.handle().clone(),
        })
    }

    /// Closes the client and gives its unissued IDs back, as [`Client::close`]; blocks
    /// for at most the close timeout.
    pub fn close(&self) -> CloseSummary {
        self.runtime.block_on(self.client.close())
    }
}

impl BlockingClientBuilder {
    /// Adjusts the settings, e.g. `.with(|b| b.prefetch_percent(50))`.
    pub fn with(self, f: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Self {
        BlockingClientBuilder(f(self.0))
    }

    pub fn servers<I, S>(self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.with(|b| b.servers(servers))
    }

    pub fn token(self, token: impl Into<String>) -> Self {
        self.with(|b| b.token(token))
    }

    /// Builds the client and its runtime (one worker thread).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the bad setting.
    pub fn build(self) -> Result<BlockingClient, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("segmint-client")
            .enable_all()
            .build()
            .map_err(|e| ErrorKind::Config(format!("runtime: {e}")))?;
        let client = {
            let _entered = runtime.enter();
            self.0.build()?
        };
        Ok(BlockingClient { client, runtime })
    }
}

/// One biz of a [`BlockingClient`].
#[derive(Clone)]
pub struct BlockingBiz {
    biz: Biz,
    runtime: tokio::runtime::Handle,
}

impl BlockingBiz {
    /// One ID: from the cache without blocking when it has one.
    ///
    /// # Errors
    /// As [`Biz::next_id`].
    #[inline]
    pub fn next_id(&self) -> Result<i64, ClientError> {
        match self.biz.try_next_id() {
            Some(id) => Ok(id),
            None => self.runtime.block_on(self.biz.next_id()),
        }
    }

    /// `n` IDs.
    ///
    /// # Errors
    /// As [`Biz::next_ids`].
    pub fn next_ids(&self, n: usize) -> Result<Vec<i64>, ClientError> {
        let mut ids = Vec::with_capacity(n);
        while !self.biz.take_into(n, &mut ids) {
            self.runtime.block_on(self.biz.refill())?;
        }
        Ok(ids)
    }

    /// Fetches, waits and the newest segment's step so far.
    pub fn stats(&self) -> BizStats {
        self.biz.stats()
    }

    /// The async handle, for [`Biz::record_segments`] and the like.
    pub fn inner(&self) -> &Biz {
        &self.biz
    }
}
