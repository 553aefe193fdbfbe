//! [`ClientBuilder`]: a client's settings, checked when it is built.

use super::*;

/// Settings of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    pub(crate) servers: Vec<String>,
    pub(crate) token: Option<String>,
    pub(crate) protocol: Protocol,
    pub(crate) prefetch_percent: u8,
    pub(crate) request_timeout: Duration,
    pub(crate) wait_timeout: Duration,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) segment_target: Duration,
    pub(crate) close_timeout: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            servers: Vec::new(),
            token: None,
            protocol: Protocol::V1,
            prefetch_percent: 20,
            request_timeout: Duration::from_secs(3),
            wait_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(10),
            segment_target: Duration::from_secs(600),
            close_timeout: Duration::from_secs(3),
        }
    }
}

impl ClientBuilder {
    /// Base URLs of the servers, e.g. `http://10.0.0.1:9999`.
    pub fn servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// The token granted the bizs this client uses.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Share of a segment issued before the next is fetched (default 20 %).
    pub fn prefetch_percent(mut self, percent: u8) -> Self {
        self.prefetch_percent = percent;
        self
    }

    /// Longest one HTTP request may take before the server counts as failed (3 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Longest a caller waits for a segment when the cache is empty (10 s).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// Back-off of a failed server: first `initial`, doubling to at most `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }

    /// How long a segment should last at the biz's peak rate in this client (10
    /// minutes): the size asked for at each fetch, within the server's bounds.
    pub fn segment_target(mut self, target: Duration) -> Self {
        self.segment_target = target;
        self
    }

    /// Longest [`Client::close`] waits for the servers to take segments back (3 s).
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Builds the client. Must be called within a Tokio runtime, which runs its
    /// background fetches.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming the bad setting.
    pub fn build(self) -> Result<Client, ClientError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ErrorKind::Config(
                "build() must run within a Tokio runtime (or use blocking::BlockingClient)".into(),
            )
        })?;
        if self.servers.is_empty() {
            return Err(ErrorKind::Config("servers: at least one is needed".into()).into());
        }
        let token = self
            .token
            .clone()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| ErrorKind::Config("token: required".into()))?;
        if self.prefetch_percent > 100 {
            return Err(
                ErrorKind::Config("prefetch_percent: must be between 0 and 100".into()).into(),
            );
        }
        if self.backoff_max < self.backoff_initial {
            return Err(ErrorKind::Config("backoff: max must be at least initial".into()).into());
        }
        if self.segment_target.is_zero() {
            return Err(ErrorKind::Config("segment_target: must be above zero".into()).into());
        }
        let servers = Arc::new(Servers::new(&self, token, close::client_id())?);
        Ok(Client {
            inner: Arc::new(Inner {
                servers,
                runtime,
                prefetch_percent: self.prefetch_percent,
                wait_timeout: self.wait_timeout,
                segment_target: self.segment_target,
                close_timeout: self.close_timeout,
                closed: Arc::new(AtomicBool::new(false)),
                bizs: RwLock::new(HashMap::new()),
            }),
        })
    }
}
