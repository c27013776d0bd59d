//! What the PostgreSQL example programs (`signoff-pg-fault`, `signoff-pg-bench`) share: their
//! argument reader, the server they are pointed at, and the clock they compare across processes.

use std::time::{SystemTime, UNIX_EPOCH};

pub type Res<T> = Result<T, String>;

/// `--name value` pairs and `--flag`s.
pub struct Args(pub Vec<String>);

impl Args {
    pub fn get(&self, name: &str) -> Option<&str> {
        // The last one wins: a script's defaults come first, its caller's overrides after.
        self.0.iter().rposition(|a| a == name).and_then(|i| self.0.get(i + 1)).map(String::as_str)
    }
    pub fn req(&self, name: &str) -> Res<&str> {
        self.get(name).ok_or_else(|| format!("missing {name}"))
    }
    pub fn num(&self, name: &str, default: u64) -> Res<u64> {
        self.get(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: not a number: {v}")))
    }
    #[allow(dead_code)] // the fault program's flags; the benchmark has none
    pub fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }
}

/// The server: `SIGNOFF_TEST_POSTGRES_URL`.
pub fn url() -> Res<String> {
    match std::env::var("SIGNOFF_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Ok(u),
        _ => Err("SIGNOFF_TEST_POSTGRES_URL is not set: run under scripts/with-postgres.sh (it starts a private \
                  PostgreSQL server and sets it)"
            .into()),
    }
}

/// Microseconds since the epoch: one clock for every process on the machine.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// A multi-threaded runtime with `workers` worker threads, time and I/O enabled.
pub fn runtime(workers: usize) -> Res<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().map_err(|e| e.to_string())
}
