//! Bridging the core's futures to JavaScript promises.
//!
//! Every gate owns a small executor that lives on the JavaScript thread:
//!
//! * A *task* is a core future (confirm, execute, a subscription's next batch, close) plus the
//!   promise it settles. Tasks are polled on the JavaScript thread, inside the tokio runtime's
//!   context so the core's timers work. The core calls the request listeners (its inline
//!   approver, see `handler.rs`) inside that poll: a listener that answers at once completes the
//!   call within the JavaScript call that started it.
//! * A task's waker pushes the task on the gate's ready queue. It is no allocation: the numbers
//!   of its gate and of its task's slot, packed in the waker's data word (see [`task_waker`]).
//!   Woken on the JavaScript thread while a call into this gate is running (a listener
//!   answering, an executor settling), that is all: the call polls the ready tasks before it
//!   returns. Woken from another thread (a timer),
//!   it also calls the gate's threadsafe function once per batch of wakes.
//! * The threadsafe function is created unreferenced, is referenced only while a confirm, execute
//!   or close is in flight (like a timer), and is released when the gate is closed or collected:
//!   it never keeps the process alive on its own.
//! * Aborting a call drops its future: the core cancels a request still waiting (`aborted`) and
//!   lets a tool that already started finish on the runtime; the caller's promise resolves `null`.
//!
//! Every native entry point runs through [`JsState::enter`], which drives the gate's ready tasks
//! before returning to JavaScript (re-entrant calls made from listeners or executors defer to the
//! outermost one).
//!
//! Requests restored by `Gate::recover` wait in tasks the core spawns on the tokio runtime, and
//! run their tool from there once approved. A JavaScript executor called off the JavaScript
//! thread is queued here ([`Shared::execute_remote`]) and called from a task of the gate's on
//! the JavaScript thread, like every other executor call. While a restored request is
//! unfinished (`Gate::restored_running`), the threadsafe function stays referenced (as for a
//! confirmation in flight); the core says when the last one finishes (`Gate::on_restored_idle`).

use crate::handler;
use napi::bindgen_prelude::{Null, ToNapiValue};
use napi::{Env, JsValue, Status, sys};
use signoff::PendingRequest;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::thread::ThreadId;

/// A task's slot in [`Tasks`] (low 32 bits) and the generation it was started in (high 32 bits),
/// so that a stale id (a late wake of a finished task whose slot was reused) finds nothing.
pub(crate) type TaskId = u64;

/// What a finished task does on the JavaScript thread: build the value its promise resolves to,
/// or fail (a thrown-and-pending exception, or an error) to reject it.
pub(crate) type Settle = Box<dyn FnOnce(&Env) -> napi::Result<sys::napi_value>>;

pub(crate) type TaskFuture = Pin<Box<dyn Future<Output = Settle>>>;

static NEXT_GATE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Gates living on this JavaScript thread, by id (the threadsafe function's context).
    static REGISTRY: RefCell<HashMap<u64, Rc<JsState>>> = RefCell::new(HashMap::new());
    /// The env of the outermost JavaScript call into a gate running on this thread (executors
    /// and request listeners are called into JavaScript with it).
    static CURRENT_ENV: Cell<Option<sys::napi_env>> = const { Cell::new(None) };
}

/// The env of the JavaScript call into a gate running on this thread, when there is one.
pub(crate) fn current_env() -> Option<sys::napi_env> {
    CURRENT_ENV.with(|c| c.get())
}

/// A gate living on this thread, by id.
pub(crate) fn state_for(gate_id: u64) -> Option<Rc<JsState>> {
    REGISTRY.with(|r| r.borrow().get(&gate_id).cloned())
}

/// A gate's threadsafe function. A copy is only used while the `Shared::tsfn` read lock it was
/// read under is held, or by the one who took it out of `Shared::tsfn` under the write lock (to
/// release it): see `Shared::notify`, `JsState::after_drive` and `JsState::release`.
#[derive(Clone, Copy)]
struct Tsfn(sys::napi_threadsafe_function);
// SAFETY: the handle is an opaque pointer to Node's thread-safe function object, which N-API
// documents as callable (`napi_call_threadsafe_function`) from any thread until it is released;
// the calls that must be made on the JavaScript thread (ref, unref, release) are only made there
// (`JsState` is `!Send`). It is only used while present in `Shared::tsfn`, which is emptied under
// the write lock before the function is released, and when Node finalizes it, so no thread can
// use it afterwards.
unsafe impl Send for Tsfn {}
// SAFETY: as for `Send`: sharing `&Tsfn` only gives out copies of the handle, used as above.
unsafe impl Sync for Tsfn {}

/// The part of a gate's executor that other threads touch.
pub(crate) struct Shared {
    pub gate_id: u64,
    pub js_thread: ThreadId,
    /// The JavaScript thread is inside a call into this gate and will drive before returning.
    active: AtomicBool,
    /// A threadsafe call is queued and has not started draining yet.
    scheduled: AtomicBool,
    /// Woken tasks, by slot (a task may appear more than once).
    ready: Mutex<Vec<u32>>,
    /// This gate's number in [`WAKE_GATES`], carried by its tasks' wakers.
    wake_slot: usize,
    tsfn: RwLock<Option<Tsfn>>,
    /// Requests the core handed to the listeners off the JavaScript thread: shown from there.
    pub requests: Mutex<Vec<PendingRequest>>,
    /// Executor calls made off the JavaScript thread, waiting to be made on it; `None` once the
    /// gate is released (later ones fail at once).
    remote: Mutex<Option<Vec<RemoteCall>>>,
}

/// An executor call made off the JavaScript thread (a restored request's tool).
pub(crate) struct RemoteCall {
    pub executor: u64,
    pub args: serde_json::Value,
    pub context: crate::tools::CallContextData,
    pub done: tokio::sync::oneshot::Sender<signoff::ExecResult>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Makes sure the JavaScript thread will look at the ready queue and the request queue.
    pub(crate) fn notify(&self) {
        if self.active.load(Ordering::SeqCst) && std::thread::current().id() == self.js_thread {
            return;
        }
        if self.scheduled.swap(true, Ordering::SeqCst) {
            return;
        }
        let guard = self.tsfn.read().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = *guard {
            // SAFETY: `t` is live: it is in `Shared::tsfn` and we hold the read lock, so it cannot
            // be released or finalized (both empty the slot under the write lock first) during the
            // call. Callable from any thread; non-blocking, so it never waits (the queue is
            // unbounded); the data pointer is unused (`tsfn_call_js` ignores it).
            unsafe {
                sys::napi_call_threadsafe_function(
                    t.0,
                    std::ptr::null_mut(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                );
            }
        }
    }

    /// Queues an executor call for the JavaScript thread. False (the call dropped) when the gate
    /// is released.
    pub(crate) fn execute_remote(&self, call: RemoteCall) -> bool {
        match locked(&self.remote).as_mut() {
            Some(q) => q.push(call),
            None => return false,
        }
        self.notify();
        true
    }
}

// Wakers carry two 32-bit numbers in their data word.
const _: () = assert!(usize::BITS >= 64, "the task wakers need a 64-bit data word");

/// The gates that tasks can be woken for, by slot (the high half of a waker's data word). A gate
/// leaves when its `Shared` is dropped; a late wake for a slot that another gate took since only
/// makes that gate poll a task that was not woken (a spurious poll, which futures allow).
static WAKE_GATES: RwLock<slab::Slab<std::sync::Weak<Shared>>> = RwLock::new(slab::Slab::new());

impl Drop for Shared {
    fn drop(&mut self) {
        WAKE_GATES.write().unwrap_or_else(|e| e.into_inner()).try_remove(self.wake_slot);
    }
}

/// The waker of the task in slot `task` of the gate in slot `gate` of [`WAKE_GATES`]: both
/// numbers in its data word, which is never dereferenced, so cloning and dropping it cost nothing.
fn task_waker(gate: usize, task: u32) -> Waker {
    let data = ((gate << 32) | task as usize) as *const ();
    // SAFETY: `WAKER` implements the `RawWaker` contract for any data word: `clone` copies it,
    // `wake` / `wake_by_ref` only read it as two integers, `drop` does nothing; nothing is ever
    // dereferenced or freed, and every function is safe to call from any thread.
    unsafe { Waker::from_raw(RawWaker::new(data, &WAKER)) }
}

static WAKER: RawWakerVTable = RawWakerVTable::new(waker_clone, waker_wake, waker_wake, waker_drop);

fn waker_clone(data: *const ()) -> RawWaker {
    RawWaker::new(data, &WAKER)
}

fn waker_wake(data: *const ()) {
    let word = data as usize;
    let gate = WAKE_GATES.read().unwrap_or_else(|e| e.into_inner()).get(word >> 32).and_then(|w| w.upgrade());
    if let Some(shared) = gate {
        locked(&shared.ready).push(word as u32);
        shared.notify();
    }
}

fn waker_drop(_: *const ()) {}

struct Task {
    id: TaskId,
    /// `None` while it is being polled.
    fut: Option<TaskFuture>,
    /// The promise to settle; `None` while the call that started the task is still running
    /// (it returns the value itself when the task finishes before it returns).
    deferred: Option<sys::napi_deferred>,
    /// No promise will ever wait for it (see `spawn_detached`).
    detached: bool,
    keepalive: bool,
    abort_id: Option<u32>,
    /// Aborted while it was being polled: dropped once the poll returns.
    aborted: bool,
    /// In the batch of woken tasks `drive` is polling, not polled yet.
    queued: bool,
}

/// A gate's tasks by id: a slab (one slot per task in flight, reused; a million pending calls
/// take a million slots, where a hash map would have two million buckets).
#[derive(Default)]
struct Tasks {
    slots: slab::Slab<Task>,
    generation: u32,
}

impl Tasks {
    fn slot(id: TaskId) -> usize {
        (id & u64::from(u32::MAX)) as usize
    }
    fn insert(&mut self, make: impl FnOnce(TaskId) -> Task) -> TaskId {
        self.generation = self.generation.wrapping_add(1);
        let entry = self.slots.vacant_entry();
        let id = (u64::from(self.generation) << 32) | entry.key() as u64;
        entry.insert(make(id));
        id
    }
    fn get(&self, id: TaskId) -> Option<&Task> {
        self.slots.get(Self::slot(id)).filter(|t| t.id == id)
    }
    fn get_mut(&mut self, id: TaskId) -> Option<&mut Task> {
        self.slots.get_mut(Self::slot(id)).filter(|t| t.id == id)
    }
    fn remove(&mut self, id: TaskId) -> Option<Task> {
        self.get(id)?;
        self.slots.try_remove(Self::slot(id))
    }
    /// The id of the task in `slot`, unless it is queued for a poll already (it is now).
    fn queue(&mut self, slot: u32) -> Option<TaskId> {
        let t = self.slots.get_mut(slot as usize)?;
        (!std::mem::replace(&mut t.queued, true)).then_some(t.id)
    }
    fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.slots.iter().map(|(_, t)| t.id)
    }
    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// A gate's executor state on the JavaScript thread.
pub(crate) struct JsState {
    pub shared: Arc<Shared>,
    pub gate: signoff::Gate,
    depth: Cell<u32>,
    tasks: RefCell<Tasks>,
    /// Tasks that finished inside the call that started them.
    finished_early: RefCell<HashMap<TaskId, Settle>>,
    abort_ids: RefCell<HashMap<u32, TaskId>>,
    keepalive: Cell<usize>,
    refed: Cell<bool>,
    pub handler: handler::HandlerJs,
    /// Close has finished in the core; resources are released at the end of the drive.
    closed: Cell<bool>,
    released: Cell<bool>,
    /// The JavaScript object was collected: forget this state once no task is left.
    orphaned: Cell<bool>,
    /// The polls running now, innermost last: the task (`None`: not a task's poll, such as the
    /// requests already pending shown to a listener added now) and the requests it published
    /// and showed to the listeners in this poll. A call aborted from inside that poll (by a
    /// listener) cannot drop its future yet: its requests are cancelled at once instead, so no
    /// approval given later in the same poll lets the tool run.
    polling: RefCell<Vec<(Option<TaskId>, Vec<uuid::Uuid>)>>,
}

/// What an aborted call's promise resolves to: `null` (the facade rejects with the signal's
/// reason).
fn aborted_settle() -> Settle {
    Box::new(|env: &Env| Ok(Null.into_unknown(env)?.raw()))
}

impl JsState {
    /// Creates the state of a new gate (the core gate is built by `make_gate`, which receives
    /// the shared half first so that the store can reach it).
    pub(crate) fn new(
        env: &Env,
        make_gate: impl FnOnce(Arc<Shared>) -> signoff::Result<signoff::Gate>,
    ) -> napi::Result<std::result::Result<Rc<JsState>, signoff::Error>> {
        let gate_id = NEXT_GATE.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new_cyclic(|me| Shared {
            wake_slot: WAKE_GATES.write().unwrap_or_else(|e| e.into_inner()).insert(me.clone()),
            gate_id,
            js_thread: std::thread::current().id(),
            active: AtomicBool::new(false),
            scheduled: AtomicBool::new(false),
            ready: Mutex::new(Vec::new()),
            tsfn: RwLock::new(None),
            requests: Mutex::new(Vec::new()),
            remote: Mutex::new(Some(Vec::new())),
        });
        let gate = match make_gate(shared.clone()) {
            Ok(g) => g,
            Err(e) => return Ok(Err(e)),
        };
        let tsfn = create_tsfn(env, &shared)?;
        *shared.tsfn.write().unwrap_or_else(|e| e.into_inner()) = Some(tsfn);
        let state = Rc::new(JsState {
            shared,
            gate,
            depth: Cell::new(0),
            tasks: RefCell::new(Tasks::default()),
            finished_early: RefCell::new(HashMap::new()),
            abort_ids: RefCell::new(HashMap::new()),
            keepalive: Cell::new(0),
            refed: Cell::new(false),
            handler: handler::HandlerJs::default(),
            closed: Cell::new(false),
            released: Cell::new(false),
            orphaned: Cell::new(false),
            polling: RefCell::new(Vec::new()),
        });
        REGISTRY.with(|r| r.borrow_mut().insert(gate_id, state.clone()));
        Ok(Ok(state))
    }

    /// Runs `f` as a call into this gate, then (outermost call only) drives the gate's tasks
    /// until nothing is ready.
    pub(crate) fn enter<R>(self: &Rc<Self>, env: &Env, f: impl FnOnce() -> R) -> R {
        let depth = self.depth.get();
        self.depth.set(depth + 1);
        let outer = depth == 0;
        let prev_env = if outer {
            self.shared.active.store(true, Ordering::SeqCst);
            CURRENT_ENV.with(|c| c.replace(Some(env.raw())))
        } else {
            None
        };
        let out = f();
        if outer {
            self.drive(env);
            if self.closed.get() && !self.released.get() {
                // Close finished in the core: release, then let what that woke finish.
                self.release(env);
                self.drive(env);
            }
            self.shared.active.store(false, Ordering::SeqCst);
        }
        self.depth.set(depth);
        if outer {
            self.after_drive(env);
            CURRENT_ENV.with(|c| c.set(prev_env));
        }
        out
    }

    fn new_task(&self, fut: TaskFuture, detached: bool, keepalive: bool, abort_id: Option<u32>) -> TaskId {
        let id = self.tasks.borrow_mut().insert(|id| Task {
            id,
            fut: Some(fut),
            deferred: None,
            detached,
            keepalive,
            abort_id,
            aborted: false,
            queued: false,
        });
        if let Some(a) = abort_id {
            self.abort_ids.borrow_mut().insert(a, id);
        }
        if keepalive {
            self.keepalive.set(self.keepalive.get() + 1);
        }
        locked(&self.shared.ready).push(Tasks::slot(id) as u32);
        id
    }

    /// Starts a task and drives it as far as it goes synchronously. Returns its value when it
    /// finished within this call (or throws its error), else a promise of it. `keepalive`: the
    /// process stays up while it is pending (a confirmation waiting for its deadline).
    pub(crate) fn run(
        self: &Rc<Self>,
        env: &Env,
        fut: TaskFuture,
        keepalive: bool,
        abort_id: Option<u32>,
    ) -> napi::Result<(TaskId, sys::napi_value)> {
        let id = self.enter(env, || self.new_task(fut, false, keepalive, abort_id));
        if let Some(settle) = self.finished_early.borrow_mut().remove(&id) {
            return settle(env).map(|v| (id, v));
        }
        let mut deferred = std::ptr::null_mut();
        let mut promise = std::ptr::null_mut();
        // SAFETY: `env` is the env of the native call running now, on its JavaScript thread; the
        // out-pointers are live locals.
        check(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
        match self.tasks.borrow_mut().get_mut(id) {
            Some(t) => t.deferred = Some(deferred),
            None => unreachable_settle(env, deferred),
        }
        Ok((id, promise))
    }

    /// Starts a task no promise waits for (its result is dropped); it keeps the process alive
    /// until it finishes.
    pub(crate) fn spawn_detached(&self, fut: TaskFuture) {
        self.new_task(fut, true, true, None);
    }

    /// Aborts the task started with `abort_id`: its future is dropped (now, or once the poll that
    /// is running returns), which makes the core cancel a request it waits on (`aborted`); a tool
    /// it started runs to the end on the runtime. Its promise resolves `null`.
    pub(crate) fn abort(self: &Rc<Self>, env: &Env, abort_id: u32) {
        let Some(id) = self.abort_ids.borrow_mut().remove(&abort_id) else { return };
        let fut = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(t) = tasks.get_mut(id) else { return };
            match t.fut.take() {
                Some(f) => f,
                None => {
                    // Being polled (the abort comes from a listener or a tool inside that poll):
                    // dropped after it; what it asked for is cancelled now.
                    t.aborted = true;
                    drop(tasks);
                    let asked: Vec<uuid::Uuid> = self
                        .polling
                        .borrow_mut()
                        .iter_mut()
                        .filter(|(task, _)| *task == Some(id))
                        .flat_map(|(_, asked)| std::mem::take(asked))
                        .collect();
                    for request in asked {
                        self.gate.cancel_request(&request);
                    }
                    return;
                }
            }
        };
        drop(fut);
        self.finish(env, id, aborted_settle());
    }

    /// Runs `f` as a poll of `task` (`None`: not a task's), for [`shown`](Self::shown).
    pub(crate) fn polling<R>(&self, task: Option<TaskId>, f: impl FnOnce() -> R) -> R {
        self.polling.borrow_mut().push((task, Vec::new()));
        let out = f();
        self.polling.borrow_mut().pop();
        out
    }

    /// Request `id` is about to be shown to the listeners: noted for the task whose poll
    /// published it, if one is being polled. False when that task was aborted earlier in this
    /// poll (a batch goes on publishing its other calls' requests in it): then the request is not
    /// to be shown, but cancelled.
    pub(crate) fn shown(&self, id: uuid::Uuid) -> bool {
        if let Some((Some(task), asked)) = self.polling.borrow_mut().last_mut() {
            if self.tasks.borrow().get(*task).is_some_and(|t| t.aborted) {
                return false;
            }
            asked.push(id);
        }
        true
    }

    fn drive(self: &Rc<Self>, env: &Env) {
        let _rt = crate::RUNTIME.enter();
        loop {
            let remote = locked(&self.shared.remote).as_mut().map(std::mem::take).unwrap_or_default();
            for call in remote {
                self.spawn_detached(crate::tools::remote_call(call, self.shared.gate_id));
            }
            let requests = std::mem::take(&mut *locked(&self.shared.requests));
            let shown = !requests.is_empty();
            for p in requests {
                handler::dispatch(env, self, p);
            }
            let ready = std::mem::take(&mut *locked(&self.shared.ready));
            if ready.is_empty() && !shown {
                break;
            }
            // In the order they were woken; a task woken twice since the last batch, once.
            let ids: Vec<TaskId> = {
                let mut tasks = self.tasks.borrow_mut();
                ready.into_iter().filter_map(|slot| tasks.queue(slot)).collect()
            };
            for id in ids {
                self.poll_task(env, id);
            }
        }
    }

    fn poll_task(self: &Rc<Self>, env: &Env, id: TaskId) {
        let mut fut = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(t) = tasks.get_mut(id) else { return };
            t.queued = false;
            let Some(f) = t.fut.take() else { return };
            f
        };
        let waker = task_waker(self.shared.wake_slot, Tasks::slot(id) as u32);
        let polled = self.polling(Some(id), || fut.as_mut().poll(&mut Context::from_waker(&waker)));
        let aborted = self.tasks.borrow().get(id).is_some_and(|t| t.aborted);
        let settle = match polled {
            _ if aborted => {
                drop(fut);
                aborted_settle()
            }
            Poll::Ready(settle) => settle,
            Poll::Pending => {
                if let Some(t) = self.tasks.borrow_mut().get_mut(id) {
                    t.fut = Some(fut);
                }
                return;
            }
        };
        self.finish(env, id, settle);
    }

    /// A task is done: its promise is settled (or its value kept for the call that started it).
    fn finish(&self, env: &Env, id: TaskId, settle: Settle) {
        let Some(task) = self.tasks.borrow_mut().remove(id) else { return };
        if task.keepalive {
            self.keepalive.set(self.keepalive.get() - 1);
        }
        if let Some(a) = task.abort_id {
            self.abort_ids.borrow_mut().remove(&a);
        }
        match task.deferred {
            Some(d) => settle_deferred(env, d, settle),
            None if task.detached => drop(settle),
            None => {
                self.finished_early.borrow_mut().insert(id, settle);
            }
        }
    }

    /// Wakes a task by id (used by subscriptions when they are closed).
    pub(crate) fn wake(&self, id: TaskId) {
        if self.tasks.borrow().get(id).is_some() {
            task_waker(self.shared.wake_slot, Tasks::slot(id) as u32).wake();
        }
    }

    /// Marks close as finished in the core: resources go at the end of this drive.
    pub(crate) fn mark_closed(&self) {
        self.closed.set(true);
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.get()
    }

    fn after_drive(self: &Rc<Self>, env: &Env) {
        let restored = self.gate.restored_running() > 0;
        let want_ref = (self.keepalive.get() > 0 || restored) && !self.released.get();
        if want_ref != self.refed.get() {
            let guard = self.shared.tsfn.read().unwrap_or_else(|e| e.into_inner());
            if let Some(t) = *guard {
                // SAFETY: on the JavaScript thread (`JsState` is `!Send`), with `env`, the env of
                // the native call running now, which created the function; `t` is live: it is in
                // `Shared::tsfn` and we hold the read lock, so it cannot be released or finalized
                // during the call.
                unsafe {
                    if want_ref {
                        sys::napi_ref_threadsafe_function(env.raw(), t.0);
                    } else {
                        sys::napi_unref_threadsafe_function(env.raw(), t.0);
                    }
                }
            }
            self.refed.set(want_ref);
        }
        if self.orphaned.get() && self.tasks.borrow().is_empty() {
            self.release(env);
            REGISTRY.with(|r| r.borrow_mut().remove(&self.shared.gate_id));
        }
    }

    /// Detaches the request listeners and releases the threadsafe function. Idempotent.
    fn release(self: &Rc<Self>, env: &Env) {
        if self.released.replace(true) {
            return;
        }
        handler::stop(self, Some(env));
        // Executor calls not made yet fail ("the tool's result was lost"); later ones at once.
        let remote = locked(&self.shared.remote).take();
        drop(remote);
        // Executor calls still running are not interrupted: each call resolves with its tool's
        // result once the tool settles (on this thread, in `settleExecution`, which drives the
        // call's task without the threadsafe function), as in every language.
        // Subscriptions waiting for events end once the gate is released: wake every task.
        let ids: Vec<TaskId> = self.tasks.borrow().ids().collect();
        for id in ids {
            self.wake(id);
        }
        let taken = self.shared.tsfn.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = taken {
            // SAFETY: on the JavaScript thread, with the env of the call (or finalizer) running
            // now. `t` was taken out of `Shared::tsfn` under the write lock, so no other thread
            // can use it any more, and it is released exactly once (it is gone from the slot); it
            // was live until then (Node's finalizer empties the slot first). This thread holds
            // the only acquisition (the one `napi_create_threadsafe_function` made), so `abort`
            // makes Node finalize it.
            unsafe {
                if self.refed.replace(false) {
                    sys::napi_unref_threadsafe_function(env.raw(), t.0);
                }
                sys::napi_release_threadsafe_function(t.0, sys::ThreadsafeFunctionReleaseMode::abort);
            }
        }
    }

    /// The JavaScript gate object was collected.
    /// Event streams end (nobody can answer through this gate any more); calls in flight finish
    /// normally; then the state is forgotten. Runs in a finalizer: it only schedules the work.
    pub(crate) fn orphan(self: &Rc<Self>, env: &Env) {
        self.orphaned.set(true);
        if self.tasks.borrow().is_empty() {
            self.release(env);
            REGISTRY.with(|r| r.borrow_mut().remove(&self.shared.gate_id));
            return;
        }
        let ids: Vec<TaskId> = self.tasks.borrow().ids().collect();
        for id in ids {
            self.wake(id);
        }
    }

    /// The gate was closed and released, or its JavaScript object collected: subscriptions end.
    pub(crate) fn is_finished(&self) -> bool {
        self.released.get() || self.orphaned.get()
    }
}

/// A task vanished between its first drive and its promise (it cannot: only finishing removes a
/// task, and that is caught above). Settle the promise rather than leak it.
fn unreachable_settle(env: &Env, deferred: sys::napi_deferred) {
    let err = crate::errors::js_error(env, "closed", "the call was lost");
    // SAFETY: `deferred` was just made by `napi_create_promise` with this env (the env of the
    // call running now) and was stored nowhere, so this settles it exactly once; `err` is a
    // handle of the current scope.
    unsafe { sys::napi_reject_deferred(env.raw(), deferred, err) };
}

/// Resolves or rejects a task's promise. `deferred` must be the task's own, unsettled: it is
/// settled (and freed by Node) here, once.
fn settle_deferred(env: &Env, deferred: sys::napi_deferred, settle: Settle) {
    match settle(env) {
        // SAFETY: `deferred` was made by `napi_create_promise` on this thread (tasks never leave
        // it), so by `env`, the env of the call running now; it is settled once, because it was
        // taken with its task out of the task map, which is the only place it was kept. `v` is a
        // handle of the current scope.
        Ok(v) => unsafe {
            sys::napi_resolve_deferred(env.raw(), deferred, v);
        },
        Err(e) => {
            let err = crate::errors::error_value(env, e);
            // SAFETY: as above, with `err`, a handle of the current scope.
            unsafe {
                sys::napi_reject_deferred(env.raw(), deferred, err);
            }
        }
    }
}

pub(crate) fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok { Ok(()) } else { Err(napi::Error::from_status(Status::from(status))) }
}

/// Node calls this on the JavaScript thread for each queued call (`env` is null while the function
/// is being torn down). It dereferences none of its pointers: `context` is the gate's id.
extern "C" fn tsfn_call_js(env: sys::napi_env, _cb: sys::napi_value, context: *mut c_void, _data: *mut c_void) {
    if env.is_null() {
        return;
    }
    if let Some(state) = state_for(context as usize as u64) {
        state.shared.scheduled.store(false, Ordering::SeqCst);
        state.enter(&Env::from_raw(env), || ());
    }
}

/// Node is done with the function (released, or its env torn down): make sure nobody calls it
/// again.
///
/// # Safety
///
/// `data` must be the `finalize_data` of [`create_tsfn`], and this must be its only use: Node
/// calls a thread-safe function's finalizer exactly once.
unsafe extern "C" fn tsfn_finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<Weak<Shared>>` that `create_tsfn` leaked with `Box::into_raw` as
    // this function's finalize data, and Node calls this finalizer once, so the box is taken back
    // exactly once.
    let shared = unsafe { Box::from_raw(data as *mut std::sync::Weak<Shared>) };
    if let Some(s) = shared.upgrade() {
        s.tsfn.write().unwrap_or_else(|e| e.into_inner()).take();
    }
}

fn create_tsfn(env: &Env, shared: &Arc<Shared>) -> napi::Result<Tsfn> {
    let resource_name = env.create_string("signoff")?.raw();
    let finalize_data = Box::into_raw(Box::new(Arc::downgrade(shared))) as *mut c_void;
    let mut tsfn = std::ptr::null_mut();
    // SAFETY: `env` is the env of the native call running now, on its JavaScript thread.
    // No JavaScript function (null) is allowed because `tsfn_call_js` is given; `resource_name`
    // is a string handle of the current scope; queue size 0 (unbounded) and 1 initial thread (the
    // one acquisition `JsState::release` gives up). `finalize_data` is a leaked box that only
    // `tsfn_finalize` (called once by Node) or the failure branch below takes back; the context
    // is the gate's id, an integer never dereferenced. `tsfn` is a live local.
    let status = unsafe {
        sys::napi_create_threadsafe_function(
            env.raw(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            resource_name,
            0,
            1,
            finalize_data,
            Some(tsfn_finalize),
            shared.gate_id as usize as *mut c_void,
            Some(tsfn_call_js),
            &mut tsfn,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: creation failed, so there is no function and Node never calls its finalizer:
        // the box leaked above is still ours, and is taken back once, here.
        drop(unsafe { Box::from_raw(finalize_data as *mut std::sync::Weak<Shared>) });
        return Err(napi::Error::from_status(Status::from(status)));
    }
    // Never keeps the process alive unless a confirmation is in flight (see `after_drive`).
    // SAFETY: on the JavaScript thread that created `tsfn` just above, with the same env; nothing
    // else has it yet.
    let unref = check(unsafe { sys::napi_unref_threadsafe_function(env.raw(), tsfn) });
    if let Err(e) = unref {
        // SAFETY: as above; released once (it is dropped here, never stored), which makes Node
        // finalize it (and `tsfn_finalize` take back `finalize_data`).
        unsafe { sys::napi_release_threadsafe_function(tsfn, sys::ThreadsafeFunctionReleaseMode::abort) };
        return Err(e);
    }
    Ok(Tsfn(tsfn))
}
