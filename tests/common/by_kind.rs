//! One test per scenario and database kind.

/// `by_kind!(scenario, …)` makes the tests `postgres::scenario`, `embedded::scenario`
/// and `mysql::scenario` (on MariaDB), each calling `scenario(Kind::…)`, an async
/// function of the test file taking the kind of database to run against.
#[macro_export]
macro_rules! by_kind {
    ($($scenario:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Postgres).await
                }
            )*
        }
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Embedded).await
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::MySql).await
                }
            )*
        }
    };
}
