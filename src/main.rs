//! The `segmint` binary: wires telemetry, configuration and the library together.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// See the `mimalloc` entry in Cargo.toml: resident memory follows what is in use.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "cli/admin.rs"]
mod admin;
#[path = "cli/changes.rs"]
mod changes;
#[path = "cli/lists.rs"]
mod lists;
#[path = "cli/reports.rs"]
mod reports;

use segmint::config::Config;
use segmint::server::Application;
use segmint::store::{OpenMode, ShapeRow, Store};

#[derive(Parser)]
#[command(
    name = "segmint",
    version,
    about = "Distributed segment-based ID server"
)]
struct Cli {
    /// Configuration file; `SEGMINT_…` environment variables override its keys.
    /// Without one: config/default.toml if present, else one embedded database in data/.
    #[arg(long, global = true, env = "SEGMINT_CONFIG")]
    config: Option<PathBuf>,
    /// Print what an admin command did (or why it failed) as one JSON document, for
    /// scripts; the same facts as the text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve IDs over HTTP until SIGINT/SIGTERM.
    Serve {
        /// Create missing embedded store files. Without it, a missing file is created
        /// only on a first start (its directory does not exist yet either).
        #[arg(long)]
        init: bool,
    },
    #[command(flatten)]
    Admin(AdminCommand),
}

/// Commands that work on the databases directly, without a server.
#[derive(Subcommand)]
enum AdminCommand {
    /// Create or upgrade the schema on every configured database (idempotent).
    Migrate,
    /// Manage bizs (ID sequences).
    #[command(subcommand)]
    Biz(BizCommand),
    /// Manage access tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage databases.
    #[command(subcommand)]
    Db(DbCommand),
    /// Work with issued IDs.
    #[command(subcommand)]
    Id(IdCommand),
    /// Import the bizs of Tinyid or Leaf, so that each issues above every ID the old
    /// system could have issued. Safe to run twice.
    #[command(subcommand)]
    Import(ImportCommand),
}

#[derive(Subcommand)]
enum ImportCommand {
    /// Rows of Tinyid's `tiny_id_info`, as `mysql --batch` exports them.
    Tinyid(ImportFile),
    /// Rows of Leaf's `leaf_alloc`, as `mysql --batch` exports them.
    Leaf(ImportFile),
}

#[derive(Args)]
struct ImportFile {
    /// The export: a header line of column names, then tab-separated rows.
    file: PathBuf,
    /// Show what the import would do, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Subcommand)]
enum DbCommand {
    /// Bring a database into the layout while servers run: every biz moves to the new
    /// residue classes (database i of n issues IDs ≡ i mod n) above every ID issued
    /// before, then servers that name it in their configuration use it (after a
    /// restart). Run again to finish a change that was cut off.
    Add {
        /// Its name (as in the configuration).
        name: String,
        /// Its URL; needed unless the configuration names it already.
        url: Option<String>,
    },
    /// Take a database out of the layout while servers run: its rows are frozen and
    /// the others move to the new classes. Servers stop using it at their next catalog
    /// refresh. Also rolls back an `add` that was cut off.
    Remove {
        /// The database's name in the configuration.
        name: String,
        /// The database is down or gone for good: it is taken out without being
        /// reached (it need not be configured), and every class it ever held is retired
        /// (never given to another database), since it may still hold live rows. Never
        /// start it again with its data: wipe it first.
        #[arg(long)]
        lost: bool,
    },
    /// Show the layout in force, its epoch, a change under way, and each database.
    List,
    /// Bring a database back after it went back in time (restored from a backup, a
    /// promoted replica): raises its biz rows above every ID that the witnesses in the
    /// other databases say was reserved from it. Servers use it again at their next
    /// catalog refresh.
    Fence {
        /// The database's name in the configuration.
        name: String,
        /// Also raise every row's max_id to at least this ID (evidence of your own, e.g.
        /// the highest ID in your tables; the only evidence with a single database).
        #[arg(long)]
        above: Option<i64>,
    },
}

#[derive(Subcommand)]
enum BizCommand {
    /// Add a biz to every database.
    Add(Box<BizAdd>),
    /// List the biz rows of every database.
    List,
    /// Serve again a biz whose counter restarts each period after its rows were moved
    /// into a later period than the databases' clocks are in (a clock that was
    /// ahead): the periods before that one come from interim rows. Changes nothing
    /// issued; safe to run again.
    Recover {
        /// The biz.
        name: String,
        /// The highest number of the current period your system holds (an ID as
        /// issued, or its number): the current period issues above it. Without it the
        /// current period issues nothing more, and the next ones do.
        #[arg(long)]
        above: Option<String>,
    },
}

#[derive(Args)]
struct BizAdd {
    /// Biz name (1-63 characters of letters, digits, '_', '-', '.').
    name: String,
    /// IDs reserved per segment; size it at about 600 × peak IDs/s.
    #[arg(long)]
    step: i64,
    /// First ID (or the next one of the biz's class).
    #[arg(long, default_value_t = 1)]
    start: i64,
    /// Issue odd IDs only.
    #[arg(long, conflicts_with = "even")]
    odd: bool,
    /// Issue even IDs only.
    #[arg(long)]
    even: bool,
    /// A note on the biz, shown by `biz list`.
    #[arg(long, default_value = "")]
    description: String,
    /// The order IDs are issued in: sequential; shuffled (a keyed order within each
    /// step's worth of IDs); opaque (a keyed bijection of the whole domain). Fixed once
    /// the biz exists.
    #[arg(long, default_value = "sequential")]
    order: String,
    /// Opaque IDs stay below this: i63 (every positive ID), js (2^53, exact in
    /// JavaScript), digits:N (N decimal digits).
    #[arg(long, default_value = "i63")]
    domain: String,
    /// Written before every ID by the v1 API (letters, digits, '_', '-'; at most 16).
    #[arg(long, default_value = "")]
    prefix: String,
    /// Digits of every ID, zero-padded; an ID that needs more is an error. 0: as many
    /// as needed.
    #[arg(long, default_value_t = 0)]
    width: u32,
    /// The base of the digits: 10, 36 (0-9a-z) or 62 (0-9A-Za-z).
    #[arg(long, default_value_t = 10)]
    base: u32,
    /// Append a check character (Damm in base 10, Luhn mod N in 36 and 62).
    #[arg(long)]
    check: bool,
    /// Have the v1 API write the IDs as JSON strings (IDs above 2^53 lose precision in
    /// JavaScript); formatted IDs always are.
    #[arg(long)]
    ids_as_strings: bool,
    /// IDs with the date, whose counter restarts each period: text (as a prefix holds),
    /// the date fields {yyyy}, {MM} and {dd}, and the counter {seq:0N} (N digits of
    /// --base), e.g. 'ORD{yyyy}{MM}{dd}{seq:06}'. The fields name the period: with
    /// {dd} a day, with {MM} a month, {yyyy} alone a year. The counter starts at
    /// --start each period.
    #[arg(long, value_name = "PATTERN", conflicts_with_all = ["prefix", "width"])]
    format: Option<String>,
    /// How often the counter restarts: the period --format's fields name (daily,
    /// monthly, yearly), said again as a check; `none` without --format.
    #[arg(long)]
    reset: Option<String>,
    /// The IANA time zone whose calendar decides the periods (Asia/Shanghai, UTC).
    #[arg(long, default_value = "UTC")]
    zone: String,
    /// A sequence biz: per-key numbers that only go up (`/v1/sequences/NAME/next`), no
    /// IDs. --step is how far each database write raises a section's bound.
    #[arg(long, conflicts_with_all = [
        "start", "odd", "even", "order", "domain", "prefix", "width", "base", "check",
        "ids_as_strings", "format", "reset", "zone",
    ])]
    sequence: bool,
    /// How many sections a sequence biz's keys are spread over, each owned by one
    /// server at a time (fixed once the biz exists).
    #[arg(long, requires = "sequence")]
    sections: Option<u32>,
}

impl BizAdd {
    /// The shape row these flags describe (key, block and restriction filled in by the
    /// store); `None` for a sequential biz written as plain numbers.
    fn shape(&self) -> std::result::Result<Option<ShapeRow>, String> {
        if self.sequence {
            return self.sequence_shape().map(Some);
        }
        let domain =
            segmint::shape::parse_domain(&self.domain).map_err(|e| format!("--domain: {e}"))?;
        let order = segmint::shape::parse_order(&self.order, 1, domain)
            .map_err(|e| format!("--order: {e}"))?;
        let base = segmint::shape::Base::from_radix(self.base)
            .ok_or_else(|| format!("--base: must be 10, 36 or 62, got {}", self.base))?;
        if let Some(period) = self.period(base, order)? {
            return Ok(Some(period));
        }
        let format = segmint::shape::Format::new(&self.prefix, self.width, base, self.check)
            .map_err(|e| match e {
                segmint::shape::FormatError::Width(_) => format!("--width: {e}"),
                e => format!("--prefix: {e}"),
            })?;
        if order == segmint::shape::IdOrder::Sequential && format.is_plain() && !self.ids_as_strings
        {
            return Ok(None);
        }
        Ok(Some(ShapeRow {
            biz_type: String::new(),
            id_order: segmint::shape::order_name(order).to_owned(),
            block: 1,
            domain: i64::try_from(domain).unwrap_or(i64::MAX),
            within_delta: 1,
            within_remainder: 0,
            key: String::new(),
            prefix: self.prefix.clone(),
            width: i32::try_from(self.width).unwrap_or(0),
            base: i32::try_from(self.base).unwrap_or(10),
            check_char: self.check,
            as_string: self.ids_as_strings,
            period: String::new(),
        }))
    }

    /// The shape row of a sequence biz (`--sequence`).
    fn sequence_shape(&self) -> std::result::Result<ShapeRow, String> {
        let max = segmint::sequence::MAX_SECTIONS;
        let sections = self.sections.unwrap_or(segmint::sequence::DEFAULT_SECTIONS);
        if !(1..=max).contains(&sections) {
            return Err(format!("--sections: must be 1 to {max}, got {sections}"));
        }
        let most = segmint::store::MAX_SEQUENCE_STEP;
        if !(1..=most).contains(&self.step) {
            return Err(format!(
                "--step: a sequence's step must be 1 to {most}, got {}",
                self.step
            ));
        }
        Ok(ShapeRow::sequence(sections))
    }

    /// The shape row of a biz whose counter restarts each period (`--format`), if
    /// one is asked for.
    fn period(
        &self,
        base: segmint::shape::Base,
        order: segmint::shape::IdOrder,
    ) -> std::result::Result<Option<ShapeRow>, String> {
        let reset = match self.reset.as_deref().map(segmint::shape::Reset::parse) {
            Some(Err(e)) => return Err(format!("--reset: {e}")),
            Some(Ok(r)) => r,
            None => None,
        };
        let Some(pattern) = &self.format else {
            return match reset {
                Some(_) => Err("--reset: a counter that restarts needs --format with the date, e.g. 'ORD{yyyy}{MM}{dd}{seq:06}'".into()),
                None => Ok(None),
            };
        };
        if order != segmint::shape::IdOrder::Sequential {
            return Err(
                "--format: a counter that restarts each period is sequential; leave --order out"
                    .into(),
            );
        }
        let format = segmint::shape::Format::with_pattern(pattern, base, self.check)
            .map_err(|e| format!("--format: {e}"))?;
        let Some((named, _)) = format.period() else {
            return Err("--format: it has no date field".into());
        };
        let reset = match (self.reset.as_deref(), reset) {
            (Some(_), None) => {
                return Err(
                    "--reset: none does not go with --format, whose date fields name a period"
                        .into(),
                );
            }
            (_, Some(r)) => r,
            (None, None) => named,
        };
        let spec = format!("{};{};{};{pattern}", reset.name(), self.zone, self.start);
        segmint::store::period_of(&spec, base, self.check).map_err(|e| {
            if e.contains("time zone") {
                format!("--zone: {e}")
            } else if e.contains("counter starts") {
                format!("--start: {e}")
            } else if e.contains("reset needs") {
                format!("--reset: {e}")
            } else {
                format!("--format: {e}")
            }
        })?;
        Ok(Some(ShapeRow::periodic(
            spec,
            i32::try_from(format.width()).unwrap_or(0),
            i32::try_from(self.base).unwrap_or(10),
            self.check,
        )))
    }
}

#[derive(Subcommand)]
enum IdCommand {
    /// What an issued ID stands for: its sequential value (undoing the biz's format and
    /// order) and the database whose class it came from.
    Decode {
        /// The biz.
        biz: String,
        /// The ID as issued: a number, or a formatted ID (`sms_000108678123`).
        id: String,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token for one or more bizs; prints it once on stdout.
    Add {
        /// A biz the token may use; repeat for several (`--biz order --biz msg_seq`).
        #[arg(long, required = true)]
        biz: Vec<String>,
        /// A note stored beside the token.
        #[arg(long, default_value = "")]
        remark: String,
        /// Refuse the token this long after now: 30s, 15m, 12h, 90d. Default: never.
        #[arg(long, value_name = "DURATION", value_parser = segmint::biz::parse_lifetime)]
        expires_in: Option<Duration>,
    },
    /// Revoke a token on every database; running servers refuse it from their next
    /// catalog refresh on.
    Revoke {
        /// The start of the token's SHA-256 (at least 8 hex digits), as `token list` shows it.
        prefix: String,
    },
    /// Create a new token for the same bizs and remark, printed once on stdout; the old
    /// one expires after the grace period.
    Rotate {
        /// The start of the old token's SHA-256 (at least 8 hex digits).
        prefix: String,
        /// How long the old token keeps working: 30s, 15m, 12h, 90d; 0 ends it now.
        #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = segmint::biz::parse_duration)]
        grace: Duration,
        /// Refuse the new token this long after now. Default: never.
        #[arg(long, value_name = "DURATION", value_parser = segmint::biz::parse_lifetime)]
        expires_in: Option<Duration>,
    },
    /// List tokens (their hashes; tokens themselves are never stored), merged over the
    /// databases.
    List,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    segmint::telemetry::init();
    let config = match Config::load_or_default(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) if cli.json => {
            eprintln!("{}", reports::Failure::of(&e).json());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("segmint: {e}");
            return ExitCode::from(2);
        }
    };
    let out = reports::Output { json: cli.json };
    let result = match cli.command {
        Command::Serve { init } => serve(
            config,
            match init {
                true => OpenMode::Create,
                false => OpenMode::FirstStart,
            },
        ),
        Command::Admin(command) => admin::run(config, command, out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if out.json => {
            eprintln!("{}", reports::Failure::of(e.as_ref()).json());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("segmint: {e}");
            if let Some(hint) = reports::Failure::of(e.as_ref()).hint {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn serve(config: Config, mode: OpenMode) -> Result {
    exit_after_stop_limit()?;
    actix_web::rt::System::new().block_on(async move {
        // Listening for the stop signal before anything answers: a SIGTERM sent as soon
        // as the server answers is not lost.
        let shutdown = segmint::server::shutdown_signal();
        let first_token = match config.all_embedded() {
            true => Store::open(&config, mode)?.first_start().await?,
            false => None,
        };
        let host = match config.bind.split_once(':') {
            Some(("0.0.0.0" | "[::]", _)) | None => "127.0.0.1".to_string(),
            Some((host, _)) => host.to_string(),
        };
        let app = Application::build(config, mode).await?;
        if let Some(token) = first_token {
            let base = format!("http://{host}:{}", app.port());
            println!(
                "segmint: first start: created biz `test` and a token for it (shown once). Try:"
            );
            println!("curl '{base}/tinyid/id/nextIdSimple?bizType=test&token={token}'");
            println!("curl -H 'Authorization: Bearer {token}' '{base}/v1/ids/test?count=3'");
        }
        app.run_until(shutdown).await?;
        tracing::info!("segmint stopped");
        Ok(())
    })
}

/// Ends the process [`STOP_LIMIT`](segmint::server::STOP_LIMIT) after the first stop
/// signal should the graceful stop not have ended it by then. The signal is awaited on
/// a thread and runtime of its own, so that nothing stuck in the server's (a worker, a
/// lock, a runtime waiting on either) can keep a stopped server alive.
///
/// # Errors
/// When the watchdog's runtime cannot be built.
fn exit_after_stop_limit() -> Result {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Listening from now on, before the server is built.
    let stop = {
        let _runtime = runtime.enter();
        segmint::server::shutdown_signal()
    };
    std::thread::Builder::new()
        .name("stop-watchdog".into())
        .spawn(move || {
            runtime.block_on(stop);
            let limit = segmint::server::STOP_LIMIT;
            std::thread::sleep(limit);
            tracing::error!(?limit, "the stop did not finish in time; exiting");
            eprintln!("segmint: the stop did not finish within {limit:?}; exiting");
            std::process::exit(1);
        })?;
    Ok(())
}
