//! One timer per gate for every pending call's deadline, instead of a tokio `Sleep` in each
//! waiting call (112 bytes each): a queue of the waiting calls ordered by deadline and one task
//! that sleeps until the earliest and wakes the calls whose deadline passed. A woken call sees
//! its deadline passed and times its request out itself (as it did when its own timer fired), so
//! what a deadline means (local, or a shared store's clock) is decided where it was before.
//!
//! The task runs on the runtime of the call that first needed it. When that runtime shuts down,
//! the task is dropped: it wakes every call still queued, and the first to poll starts a new
//! task on its own runtime, so no call is left without a timer.

use super::answer::Slot;
use super::lock;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Default)]
pub(super) struct Timer {
    state: Mutex<State>,
    /// Told when an earlier deadline is queued, and when the gate goes away.
    notify: Notify,
    /// The gate went away: the task ends.
    closed: AtomicBool,
}

#[derive(Default)]
struct State {
    queue: BTreeSet<Due>,
    /// The deadline the task sleeps until (`None`: until told).
    armed: Option<Instant>,
    /// A task is running (cleared by the task's own drop, also when its runtime shuts down).
    running: bool,
}

/// A waiting call in the queue, ordered by (deadline, request id) read through its slot.
struct Due(Arc<Slot>);

impl Due {
    fn key(&self) -> (Instant, uuid::Uuid) {
        (self.0.deadline, self.0.request.id)
    }
}
ord_by_key!(Due, key);

impl Timer {
    /// Whether `slot`'s deadline has passed. When it has not, the call is queued (`queued`
    /// remembers it) and is woken once it has; when it has, it leaves the queue.
    ///
    /// Called from the call's poll, inside a tokio runtime (a timer needs one, as a `Sleep` did).
    pub(super) fn due(self: &Arc<Self>, slot: &Arc<Slot>, queued: &mut bool) -> bool {
        let restart = {
            let mut st = lock(&self.state);
            if Instant::now() >= slot.deadline {
                if std::mem::take(queued) {
                    st.queue.remove(&Due(slot.clone()));
                }
                return true;
            }
            if !*queued {
                st.queue.insert(Due(slot.clone()));
                *queued = true;
                // Earlier than what the task sleeps until, or it sleeps until told (an empty
                // queue, or not started yet: a spare notification only makes it look again).
                if st.armed.is_none_or(|a| slot.deadline < a) {
                    self.notify.notify_one();
                }
            }
            !std::mem::replace(&mut st.running, true)
        };
        if restart {
            // The guard is made here, not in the task: a task dropped before its first poll
            // (its runtime shutting down) still clears `running` and wakes the queue.
            let running = Running(self.clone());
            drop(tokio::spawn(async move { running.run().await }));
        }
        false
    }

    /// The call left its wait (answered, timed out, dropped).
    pub(super) fn forget(&self, slot: &Arc<Slot>, queued: &mut bool) {
        if std::mem::take(queued) {
            lock(&self.state).queue.remove(&Due(slot.clone()));
        }
    }

    /// The gate went away.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// The task's hold on the timer. Dropped (the task ended, or its runtime dropped it, polled or
/// not), it clears `running` and wakes every queued call, so that one of them starts a task on
/// its own runtime.
struct Running(Arc<Timer>);

impl Running {
    async fn run(self) {
        let sleep = tokio::time::sleep_until(Instant::now());
        tokio::pin!(sleep);
        loop {
            if self.0.closed.load(Ordering::SeqCst) {
                return;
            }
            let (due, next) = {
                let mut st = lock(&self.0.state);
                let now = Instant::now();
                let mut due = Vec::new();
                while st.queue.first().is_some_and(|d| d.0.deadline <= now) {
                    due.extend(st.queue.pop_first());
                }
                let next = st.queue.first().map(|d| d.0.deadline);
                st.armed = next;
                (due, next)
            };
            // Outside the lock: a woken call may poll at once, on this thread.
            for d in due {
                d.0.wake_call();
            }
            match next {
                Some(at) => {
                    sleep.as_mut().reset(at);
                    tokio::select! {
                        _ = sleep.as_mut() => {}
                        _ = self.0.notify.notified() => {}
                    }
                }
                None => self.0.notify.notified().await,
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let queued: Vec<Arc<Slot>> = {
            let mut st = lock(&self.0.state);
            st.running = false;
            st.armed = None;
            if self.0.closed.load(Ordering::SeqCst) {
                return;
            }
            st.queue.iter().map(|d| d.0.clone()).collect()
        };
        for slot in queued {
            slot.wake_call();
        }
    }
}
