//! PostgreSQL: one store shared by many agents and approvers on many hosts, and the audit chain
//! in a table of the same database (cargo feature `postgres`). See [`PostgresStore`] and
//! [`PostgresAuditSink`].

mod audit;
mod db;
mod store;

pub use audit::{PostgresAuditSink, verify_chain_postgres};
pub use store::{PostgresOptions, PostgresStore};
