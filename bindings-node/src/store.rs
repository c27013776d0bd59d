//! The core's in-memory pending store, with a hook that tells the driver which requests the task
//! being polled just created (to cancel them on abort, and to show them to a request listener
//! from the JavaScript thread without a thread hop). No decision is made here.

use crate::driver::{self, Shared};
use signoff::{ConfirmationRequest, MemoryPendingStore, PendingStore};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use uuid::Uuid;

pub(crate) struct HookStore {
    inner: MemoryPendingStore,
    shared: Arc<Shared>,
}

impl HookStore {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        HookStore { inner: MemoryPendingStore::new(), shared }
    }
}

impl PendingStore for HookStore {
    fn insert(&self, request: Arc<ConfirmationRequest>) -> signoff::Result<()> {
        self.inner.insert(request.clone())?;
        // Called before the request is published, so the claim exists before the core's handler
        // driver can see the request.
        let listening = self.shared.handler.active.load(Ordering::SeqCst);
        if driver::capture(self.shared.gate_id, &request, listening) && listening {
            self.shared.handler.claim_inline(request.id);
        }
        Ok(())
    }
    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.remove(id)
    }
    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.get(id)
    }
    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.list()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
}
