//! Seams: where pending requests are stored, and how a response is authenticated.
//! In-memory and accept-all defaults; a durable store and signed tokens plug in here.

use crate::error::Result;
use crate::event::{ConfirmationRequest, ConfirmationResponse};
use rustc_hash::FxBuildHasher;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Where pending requests live while they wait. The gate inserts a request before publishing
/// it and removes it exactly once when it resolves; [`Gate::pending`](crate::Gate::pending)
/// (the snapshot a late or lagging UI re-syncs from) lists it.
pub trait PendingStore: Send + Sync + 'static {
    /// Stores a new pending request. An error refuses the call (it never runs unapproved).
    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()>;
    /// Removes a request that has resolved.
    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>>;
    /// One request.
    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>>;
    /// Every pending request, oldest first.
    fn list(&self) -> Vec<Arc<ConfirmationRequest>>;
    /// How many are pending.
    fn len(&self) -> usize;
    /// No request is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The default store: a hash map behind a mutex.
#[derive(Default)]
pub struct MemoryPendingStore {
    map: Mutex<HashMap<Uuid, Arc<ConfirmationRequest>, FxBuildHasher>>,
}

impl MemoryPendingStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Arc<ConfirmationRequest>, FxBuildHasher>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PendingStore for MemoryPendingStore {
    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()> {
        self.map().insert(request.id, request);
        Ok(())
    }
    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.map().remove(id)
    }
    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.map().get(id).cloned()
    }
    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        let mut v: Vec<_> = self.map().values().cloned().collect();
        v.sort_by_key(|r| (r.created_at_ms, r.id));
        v
    }
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// Decides whether a response may answer a request (who is answering, with what credential).
/// Runs after the response has been matched to its request and before it takes effect.
pub trait ResponseAuthenticator: Send + Sync + 'static {
    /// `Err(reason)` rejects the response with [`ErrorKind::Unauthorized`](crate::ErrorKind).
    fn authenticate(&self, request: &ConfirmationRequest, response: &ConfirmationResponse) -> Result<(), String>;
}

/// The default: any in-process response that matches its request is accepted.
#[derive(Debug, Default, Clone, Copy)]
pub struct AcceptAll;

impl ResponseAuthenticator for AcceptAll {
    fn authenticate(&self, _: &ConfirmationRequest, _: &ConfirmationResponse) -> Result<(), String> {
        Ok(())
    }
}

/// Accepts only responses whose `responder` is in a fixed list.
#[derive(Debug, Clone)]
pub struct AllowedResponders(pub Vec<String>);

impl ResponseAuthenticator for AllowedResponders {
    fn authenticate(&self, _: &ConfirmationRequest, response: &ConfirmationResponse) -> Result<(), String> {
        match &response.responder {
            Some(r) if self.0.iter().any(|a| a == r) => Ok(()),
            Some(r) => Err(format!("responder {r:?} may not approve this request")),
            None => Err("the response names no responder".into()),
        }
    }
}
