//! rmcp's own client, declaring elicitation and answering it as a person would: shared by the
//! tests (through `common`) and by `examples/bench.rs` (by path).
#![allow(dead_code)]

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    ProtocolVersion,
};
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `clientInfo.name` an [`Answering`] client declares (the principal the gate sees).
pub const CLIENT_NAME: &str = "rmcp-person";

/// A client that declares elicitation in the era of `version` and gives every elicitation the
/// same answer, counting how often it was asked (in the 2025 eras an `elicitation/create`, in
/// 2026-07-28 each input request of an `InputRequiredResult`, which rmcp's `call_tool` answers
/// through this handler before retrying).
#[derive(Clone)]
pub struct Answering {
    /// The protocol version it speaks.
    pub version: ProtocolVersion,
    /// What it answers to every elicitation.
    pub answer: ElicitResult,
    /// How many times it was asked (shared by its clones).
    pub asked: Arc<AtomicUsize>,
}

impl Answering {
    fn new(version: ProtocolVersion, answer: ElicitResult) -> Self {
        Answering { version, answer, asked: Default::default() }
    }

    fn accept(version: ProtocolVersion, content: serde_json::Value) -> Self {
        Self::new(version, ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }

    /// Approves once.
    pub fn approve(version: ProtocolVersion) -> Self {
        Self::accept(version, json!({"decision": "approve"}))
    }

    /// Approves for the session.
    pub fn approve_session(version: ProtocolVersion) -> Self {
        Self::accept(version, json!({"decision": "approve_session"}))
    }

    /// Denies, giving a reason.
    pub fn deny(version: ProtocolVersion, reason: &str) -> Self {
        Self::accept(version, json!({"decision": "deny", "reason": reason}))
    }

    /// Cancels the elicitation.
    pub fn cancel(version: ProtocolVersion) -> Self {
        Self::new(version, ElicitResult::new(ElicitationAction::Cancel))
    }

    /// How many times it was asked.
    pub fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }

    /// Connects over `transport` in its era: the `initialize` handshake before 2026-07-28,
    /// `server/discover` (with capabilities and `clientInfo` in every request) from it on.
    pub async fn connect<T, E, A>(
        self,
        transport: T,
    ) -> Result<RunningService<RoleClient, Answering>, ClientInitializeError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let lifecycle = lifecycle(&self.version);
        self.serve_with_lifecycle(transport, lifecycle).await
    }
}

/// How a client speaks `version`: `initialize` for the 2025 eras, `server/discover` for 2026-07-28.
pub fn lifecycle(version: &ProtocolVersion) -> ClientLifecycleMode {
    if version.has_initialize() {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover { preferred_versions: vec![version.clone()] }
    }
}

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new(CLIENT_NAME, "0"),
        )
        .with_protocol_version(self.version.clone())
    }

    async fn create_elicitation(
        &self,
        _req: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(self.answer.clone())
    }
}

/// A 2025-06-18 client whose person takes their time: each elicitation waits for `release`,
/// then approves. A question the proxy withdraws meanwhile (`notifications/cancelled`) is
/// counted in `withdrawn`, and still answered when released (as a client that ignores it would).
#[derive(Clone, Default)]
pub struct Slow {
    /// How many times it was asked.
    pub asked: Arc<AtomicUsize>,
    /// Lets one waiting answer go.
    pub release: Arc<tokio::sync::Notify>,
    /// How many questions were withdrawn while open.
    pub withdrawn: Arc<AtomicUsize>,
}

impl ClientHandler for Slow {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("rmcp-slow-person", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_06_18)
    }

    async fn create_elicitation(
        &self,
        _req: ElicitRequestParams,
        cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            _ = self.release.notified() => {}
            _ = cx.ct.cancelled() => {
                self.withdrawn.fetch_add(1, Ordering::SeqCst);
                self.release.notified().await;
            }
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": "approve"})))
    }
}
