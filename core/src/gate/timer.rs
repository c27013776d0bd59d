//! One timer per gate and runtime for every pending call's deadline, instead of a tokio `Sleep`
//! in each waiting call (112 bytes each): a queue of the waiting calls ordered by deadline, and on
//! each runtime where calls wait, one task that sleeps until the earliest deadline and wakes the
//! calls whose deadline passed (whichever runtime they wait on). A woken call sees its deadline
//! passed and times its request out itself (as it did when its own timer fired), so what a
//! deadline means (local, or a shared store's clock) is decided where it was before.
//!
//! A task per runtime, not one per gate: a runtime can be alive and not driven (a current-thread
//! runtime between two `block_on`s, or its thread busy with synchronous work); a single task living
//! there would hold every other runtime's calls past their deadline. A call's own runtime is
//! driven while the call is awaited there, so its task runs. When a runtime shuts down, its task is
//! dropped: it wakes every call still queued, and each call that polls again makes sure its own
//! runtime has a task, so no call is left without a timer.

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
    /// The gate went away: the tasks end.
    closed: AtomicBool,
}

#[derive(Default)]
struct State {
    queue: BTreeSet<Due>,
    /// The tasks running, one per runtime on which calls have waited.
    tasks: Vec<Task>,
    next_key: u64,
}

/// A timer task, as the queue knows it.
struct Task {
    key: u64,
    runtime: tokio::runtime::Id,
    /// Told when an earlier deadline is queued, and when the gate goes away.
    notify: Arc<Notify>,
    /// The deadline it sleeps until (`None`: until told).
    armed: Option<Instant>,
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
    /// Called from the call's poll, inside a tokio runtime (a timer needs one, as a `Sleep` did),
    /// which gets a timer task if it has none.
    pub(super) fn due(self: &Arc<Self>, slot: &Arc<Slot>, queued: &mut bool) -> bool {
        let runtime = tokio::runtime::Handle::current();
        let start = {
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
                // Earlier than what a task sleeps until, or it sleeps until told (an empty queue,
                // or not started yet: a spare notification only makes it look again).
                for t in &st.tasks {
                    if t.armed.is_none_or(|a| slot.deadline < a) {
                        t.notify.notify_one();
                    }
                }
            }
            let id = runtime.id();
            if st.tasks.iter().any(|t| t.runtime == id) {
                None
            } else {
                let key = st.next_key;
                st.next_key += 1;
                let notify = Arc::new(Notify::new());
                st.tasks.push(Task { key, runtime: id, notify: notify.clone(), armed: None });
                Some(Running { timer: self.clone(), key, notify })
            }
        };
        if let Some(running) = start {
            // The guard is made before the task: a task dropped before its first poll (its
            // runtime shutting down) still leaves the list and wakes the queue.
            drop(runtime.spawn(async move { running.run().await }));
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
        for t in &lock(&self.state).tasks {
            t.notify.notify_one();
        }
    }
}

/// A task's hold on the timer. Dropped (the task ended, or its runtime dropped it, polled or not),
/// it leaves the list of tasks and wakes every queued call, so that each makes sure its own runtime
/// has a task.
struct Running {
    timer: Arc<Timer>,
    key: u64,
    notify: Arc<Notify>,
}

impl Running {
    async fn run(self) {
        let sleep = tokio::time::sleep_until(Instant::now());
        tokio::pin!(sleep);
        loop {
            if self.timer.closed.load(Ordering::SeqCst) {
                return;
            }
            let (due, next) = {
                let mut st = lock(&self.timer.state);
                let now = Instant::now();
                let mut due = Vec::new();
                while st.queue.first().is_some_and(|d| d.0.deadline <= now) {
                    due.extend(st.queue.pop_first());
                }
                let next = st.queue.first().map(|d| d.0.deadline);
                if let Some(t) = st.tasks.iter_mut().find(|t| t.key == self.key) {
                    t.armed = next;
                }
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
                        _ = self.notify.notified() => {}
                    }
                }
                None => self.notify.notified().await,
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let queued: Vec<Arc<Slot>> = {
            let mut st = lock(&self.timer.state);
            st.tasks.retain(|t| t.key != self.key);
            if self.timer.closed.load(Ordering::SeqCst) {
                return;
            }
            st.queue.iter().map(|d| d.0.clone()).collect()
        };
        for slot in queued {
            slot.wake_call();
        }
    }
}
