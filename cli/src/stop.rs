//! Stopping on a signal. `signoff console` and `signoff mcp-proxy` (stdio and HTTP) end the same
//! way on SIGINT (Ctrl-C), SIGTERM (a service manager, `kill`) or SIGHUP (the terminal closed):
//! the gate is closed (pending calls cancelled as `shutdown`, audited) and the audit log flushed,
//! then the process exits 0. The default action of these signals ends the process at once, and
//! audit records still queued for the log's writer would be lost.

use std::future::Future;
use std::pin::Pin;

/// Completes at the first stopping signal.
pub(crate) type Stop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Takes over the stopping signals now (inside a runtime): one that arrives before the returned
/// future is first awaited still counts, and none of them ends the process by itself any more.
pub(crate) fn signals() -> Result<Stop, String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| signal(kind).map_err(|e| format!("cannot handle {name}: {e}"));
        let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
        let mut terminate = listen(SignalKind::terminate(), "SIGTERM")?;
        let mut hangup = listen(SignalKind::hangup(), "SIGHUP")?;
        Ok(Box::pin(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
                _ = hangup.recv() => {}
            }
        }))
    }
    #[cfg(not(unix))]
    {
        let mut ctrl_c = tokio::signal::windows::ctrl_c().map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
        Ok(Box::pin(async move {
            ctrl_c.recv().await;
        }))
    }
}
