//! Configuring and building a [`Gate`].

use super::{Gate, Inner, Tombstones};
use crate::audit::{AuditRecord, AuditSink};
use crate::config::Host;
use crate::error::Result;
use crate::policy::Policy;
use crate::store::{MemoryPendingStore, PendingStore, ResponseAuthenticator};
use crate::token::TokenKeys;
use crate::tool::Tool;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::broadcast;

/// Configures a [`Gate`].
pub struct GateBuilder {
    policy: Policy,
    store: Option<Arc<dyn PendingStore>>,
    authenticator: Option<Arc<dyn ResponseAuthenticator>>,
    audit: Option<Arc<dyn AuditSink>>,
    bus_capacity: usize,
    deny_when_unobserved: bool,
    remembered: usize,
    tools: Vec<Tool>,
    tokens: Option<TokenKeys>,
    token_ttl: Option<Duration>,
    host: Host,
}

impl Default for GateBuilder {
    fn default() -> Self {
        GateBuilder {
            policy: Policy::default(),
            store: None,
            authenticator: None,
            audit: None,
            bus_capacity: 4096,
            deny_when_unobserved: true,
            remembered: 65_536,
            tools: Vec::new(),
            tokens: None,
            token_ttl: None,
            host: Host::Rust,
        }
    }
}

impl GateBuilder {
    /// Replaces the whole policy.
    pub fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }
    /// Replaces the keyword list.
    pub fn keywords<I: IntoIterator<Item = S>, S: Into<String>>(mut self, k: I) -> Self {
        self.policy.keywords = k.into_iter().map(Into::into).collect();
        self
    }
    /// The approval timeout for tools that set none (60 s by default).
    pub fn default_timeout(mut self, t: Duration) -> Self {
        self.policy.default_timeout = t;
        self
    }
    /// DEVELOPMENT ONLY: every call runs without approval. Announced on stderr and in the audit
    /// log when the gate is built.
    pub fn dangerously_disable_gating(mut self, yes: bool) -> Self {
        self.policy.gating_disabled = yes;
        self
    }
    /// Where pending requests are kept (in memory by default).
    pub fn store(mut self, s: Arc<dyn PendingStore>) -> Self {
        self.store = Some(s);
        self
    }
    /// Who may answer (by default any in-process response that matches its request).
    pub fn authenticator(mut self, a: Arc<dyn ResponseAuthenticator>) -> Self {
        self.authenticator = Some(a);
        self
    }
    /// Where audit records go (none by default).
    pub fn audit(mut self, a: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(a);
        self
    }
    /// How many events the bus buffers per subscriber before that subscriber is told it lagged
    /// (4,096; from 1 to [`MAX_BUS_CAPACITY`](crate::config::MAX_BUS_CAPACITY), else `build`
    /// fails with `config`).
    pub fn bus_capacity(mut self, n: usize) -> Self {
        self.bus_capacity = n;
        self
    }
    /// With `true` (the default), a request made while no approver is attached (observers do
    /// not count; see [`Gate::subscribe`]), and every request pending when the last approver goes
    /// away, is cancelled at once ([`CancelReason::NoApprover`](crate::CancelReason::NoApprover)). Set `false` when responses come from elsewhere (a
    /// remote UI calling [`Gate::respond`] after listing [`Gate::pending`]): requests then wait
    /// for their deadline.
    pub fn deny_when_unobserved(mut self, yes: bool) -> Self {
        self.deny_when_unobserved = yes;
        self
    }
    /// How many resolved request ids are remembered to classify late responses (65,536; at most
    /// [`MAX_REMEMBERED`](crate::config::MAX_REMEMBERED), else [`build`](Self::build) fails with
    /// `config`): at least the last `n`, and at most two tables of them more (`n / 64` ids, at least
    /// 1,024, and at most `n`).
    pub fn remember_resolved(mut self, n: usize) -> Self {
        self.remembered = n;
        self
    }
    /// The keys approval tokens are signed and verified with (see [`Gate::issue_token`]).
    /// Load them from configuration ([`TokenKeys::from_env`], [`TokenKeys::from_file`]) so
    /// tokens stay valid across a restart.
    pub fn tokens(mut self, keys: TokenKeys) -> Self {
        self.tokens = Some(keys);
        self
    }
    /// How long an issued token is valid (by default until its request's deadline; never
    /// beyond it).
    pub fn token_ttl(mut self, ttl: Duration) -> Self {
        self.token_ttl = Some(ttl);
        self
    }
    /// The language the gate is used from ([`Host::Rust`] by default): its warnings and errors
    /// then name that language's API (`Gate(deny_when_unobserved=False)` for
    /// [`Host::Python`], not this builder's methods). Bindings set it through
    /// [`GateConfig::host`](crate::GateConfig::host).
    pub fn host(mut self, host: Host) -> Self {
        self.host = host;
        self
    }
    /// Registers a tool when the gate is built.
    pub fn tool(mut self, t: Tool) -> Self {
        self.tools.push(t);
        self
    }

    /// Builds the gate; fails with `invalid_tool` if a tool given to [`tool`](Self::tool) is invalid,
    /// `config` for a bus capacity or a count of remembered ids out of range (the bounds of
    /// [`GateConfig`](crate::GateConfig)).
    pub fn build(self) -> Result<Gate> {
        if !(1..=crate::config::MAX_BUS_CAPACITY).contains(&self.bus_capacity) {
            return Err(crate::Error::Config(format!(
                "bus capacity must be from 1 to {}, got {}",
                crate::config::MAX_BUS_CAPACITY,
                self.bus_capacity
            )));
        }
        if self.remembered > crate::config::MAX_REMEMBERED {
            return Err(crate::Error::Config(format!(
                "the count of remembered resolved ids must be at most {}, got {}",
                crate::config::MAX_REMEMBERED,
                self.remembered
            )));
        }
        let (bus, _) = broadcast::channel(self.bus_capacity);
        let store: Arc<dyn PendingStore> = self.store.unwrap_or_else(|| Arc::new(MemoryPendingStore::new()));
        if let (Some(audit), Some(anchor)) = (&self.audit, store.clone().audit_anchor()) {
            audit.set_anchor(anchor);
        }
        let shared = store.is_shared();
        let gate = Gate {
            inner: Arc::new_cyclic(|me| Inner {
                inserting: Mutex::new(HashMap::default()),
                built_at_ms: crate::event::now_ms(),
                markers: Mutex::default(),
                timer: Arc::default(),
                restored: Default::default(),
                runs: Default::default(),
                watcher: shared
                    .then(|| Arc::new(super::shared::Watcher(me.clone())) as Arc<dyn crate::store::StoreWatcher>),
                policy: self.policy,
                tools: RwLock::new(HashMap::default()),
                bus,
                store,
                authenticator: self.authenticator,
                audit: self.audit,
                waiters: Mutex::new(HashSet::default()),
                grants: Mutex::new(HashMap::new()),
                tombstones: Mutex::new(Tombstones::new(self.remembered)),
                closed: AtomicBool::new(false),
                approvers: AtomicUsize::new(0),
                subscriptions: Mutex::new(Vec::new()),
                inline: RwLock::new(Arc::from(Vec::new())),
                next_inline: std::sync::atomic::AtomicU64::new(0),
                deny_when_unobserved: self.deny_when_unobserved,
                tokens: self.tokens,
                token_ttl: self.token_ttl,
                host: self.host,
                requests_made: AtomicBool::new(false),
                recovered: AtomicBool::new(false),
                warned_unobserved: AtomicBool::new(false),
            }),
        };

        if let Some(w) = &gate.inner.watcher {
            gate.inner.store.watch(Arc::downgrade(w));
        }
        for t in self.tools {
            gate.register(t)?;
        }
        if gate.inner.policy.gating_disabled {
            crate::report!("signoff: WARNING: gating is DISABLED on this gate; every tool call runs without approval");
            gate.audit(|| {
                AuditRecord::notice(
                    "gating-disabled",
                    "dangerously_disable_gating is on: every call runs without approval",
                )
            });
        }
        Ok(gate)
    }
}
