//! asyncio <-> tokio glue.
//!
//! * The tokio runtime (multi-threaded) runs timers and the work the core hands off (a tool that
//!   keeps running after its caller stopped waiting); Python code never runs on a tokio worker
//!   thread ([`on_runtime_thread`] tells). Sync Python executors run on the runtime's blocking pool.
//! * Rust -> asyncio: [`spawn`] drives a core future from the calling thread's running loop and
//!   returns an `asyncio.Future`. The future is polled on the loop's thread (briefly, with the
//!   GIL; core futures never block), so the core's inline approvers (`handler.rs`) run right
//!   there; a tokio thread that wakes it only queues a poll on that loop's [`LoopBridge`] and
//!   writes a byte to a socket the loop watches (`loop.add_reader`), so no tokio thread ever
//!   waits for the GIL, and many wake-ups are handled in one loop callback. Cancelling the
//!   asyncio future drops the core future at once (the core then applies its cancellation rule).
//! * asyncio -> Rust: [`call_on_loop`] runs a Python callable on a loop's thread (at once when
//!   already there), wraps an awaitable result in a Task, and resolves a Rust future when it is
//!   done. The Task is never cancelled from here: a started tool finishes.
//! * Blocking calls ([`block_on`]) poll the core future on the calling thread without the GIL and
//!   check for signals, so Ctrl-C raises `KeyboardInterrupt` (after dropping the core future).

use pyo3::exceptions::{PyRuntimeError, PyTimeoutError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// The runtime every core future runs on: one per process. A child made by `os.fork()` gets
/// none of its parent's threads, so the runtime it inherited never runs a task (a sync tool would
/// never start, a deadline never end a call): the first use after a fork starts a new one. The
/// parent's is left as it is in the child (dropping it would wait for threads that are not there).
pub fn runtime() -> &'static Runtime {
    /// The runtime and the count of forks it was made after, as one pointer (read at once).
    static CURRENT: AtomicPtr<(u64, Runtime)> = AtomicPtr::new(std::ptr::null_mut());
    static MAKING: Mutex<()> = Mutex::new(());
    let forks = FORKS.load(Ordering::Acquire);
    // SAFETY: a non-null `CURRENT` points to a pair leaked below, never freed.
    if let Some((made_after, rt)) = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }
        && *made_after == forks
    {
        return rt;
    }
    let _making = lock(&MAKING);
    // SAFETY: as above.
    if let Some((made_after, rt)) = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }
        && *made_after == forks
    {
        return rt;
    }
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 8);
    let made: &'static (u64, Runtime) = Box::leak(Box::new((
        forks,
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            // Sync Python executors run here; they serialize on the GIL, so many threads help only
            // executors that release it (I/O).
            .max_blocking_threads(64)
            .thread_name("signoff-rt")
            .on_thread_start(|| RUNTIME_THREAD.with(|r| r.set(true)))
            .enable_all()
            .build()
            .expect("signoff: cannot start the tokio runtime"),
    )));
    CURRENT.store(std::ptr::from_ref(made).cast_mut(), Ordering::Release);
    &made.1
}

/// True on the runtime's own threads (workers and blocking pool), where no Python code may wait.
pub fn on_runtime_thread() -> bool {
    RUNTIME_THREAD.with(Cell::get)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
static ATTACHING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Attaches a background thread (a handler thread, a blocking-pool thread) to the interpreter,
/// unless the interpreter is shutting down. A thread that tries to take the GIL while the
/// interpreter finalizes is terminated by CPython with `pthread_exit`, which aborts the process
/// when it unwinds through Rust frames; so at exit ([`at_exit`]) new attaches are refused and
/// the ones in flight are waited for.
pub fn attach_bg<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    ATTACHING.fetch_add(1, Ordering::SeqCst);
    let r = if SHUTTING_DOWN.load(Ordering::SeqCst) { None } else { Python::try_attach(f) };
    ATTACHING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Registered with `atexit`: refuse background attaches from now on, and let the ones in
/// flight finish (up to 2 s) before the interpreter starts finalizing.
#[pyfunction]
fn at_exit(py: Python<'_>) {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    py.detach(|| {
        let end = std::time::Instant::now() + Duration::from_secs(2);
        while ATTACHING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Work to run on a loop's thread, with the GIL.
pub type Job = Box<dyn FnOnce(Python<'_>) + Send>;

enum Waker {
    /// A socket pair; the loop watches `rx` with `add_reader`.
    #[cfg(unix)]
    Socket { tx: std::os::unix::net::UnixStream, rx: std::os::unix::net::UnixStream },
    /// `loop.call_soon_threadsafe`, from a blocking-pool thread (loops without `add_reader`).
    Threadsafe,
}

/// One asyncio event loop, as seen from tokio: a queue of jobs the loop runs in batches.
pub struct LoopBridge {
    event_loop: Py<PyAny>,
    /// The thread the loop runs on.
    thread: std::thread::ThreadId,
    create_future: Py<PyAny>,
    /// `{"context": <an empty contextvars.Context>}`: the keyword arguments of the
    /// `add_done_callback` that cancels a call. Its callback reads no context variable, and
    /// without a context asyncio copies the caller's for every pending call (~80 bytes each).
    /// One per loop: a context is entered by one thread at a time.
    quiet_context: Py<pyo3::types::PyDict>,
    queue: Mutex<Vec<Job>>,
    wake_pending: AtomicBool,
    closed: AtomicBool,
    waker: Waker,
    /// `threading.get_ident()` of its thread, when the loop records the thread it runs on as
    /// asyncio's loops do (`_thread_id`): see [`runs_here`](Self::runs_here).
    ident: Option<u64>,
    /// [`FORKS`] when it was made.
    forks: u64,
    /// Before Python 3.12 (no `eager_start`), on asyncio's own loops: a Task's first step can be
    /// run at once by hand ([`start_eagerly`](Self::start_eagerly)).
    eager_by_hand: bool,
    /// The keyword arguments of `asyncio.Task(coro, ...)` for a tool's Task: `loop`, and from
    /// Python 3.12 on `eager_start=True` (made once: a call does not keep or change them).
    task_kw: Py<pyo3::types::PyDict>,
}

/// Forks of this process seen through `os.register_at_fork` (counted in the child): a bridge
/// made before a fork is not taken for the running loop after it.
static FORKS: AtomicU64 = AtomicU64::new(0);

#[pyfunction]
fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

thread_local! {
    /// Set on the runtime's threads.
    static RUNTIME_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Tasks woken inside [`polling_woken`] on this thread.
    static WOKEN: RefCell<Option<Vec<Arc<dyn Driven>>>> = const { RefCell::new(None) };
    /// The bridge of the loop last seen running on this thread.
    static CURRENT: RefCell<Option<Arc<LoopBridge>>> = const { RefCell::new(None) };
}

tokio::task_local! {
    /// The bridge of the loop that awaits the current core future (for async executors).
    pub static CALLER: Arc<LoopBridge>;
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static RUNNING_LOOP_OR_NONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ENSURE_FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ISAWAITABLE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ISCOROUTINE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ASYNCIO_RUN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static RUN_THEN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static COROUTINE_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static HANDLE_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static BASE_EVENT_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DEQUE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CURRENT_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CURRENT_TASKS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ENTER_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static LEAVE_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `asyncio.get_running_loop()` (raises `RuntimeError` when none runs on this thread).
pub fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?.call0()
}

/// True when an event loop runs on this thread.
pub fn loop_running_here(py: Python<'_>) -> bool {
    RUNNING_LOOP_OR_NONE
        .import(py, "asyncio", "_get_running_loop")
        .and_then(|f| f.call0())
        .map(|l| !l.is_none())
        .unwrap_or(false)
}

/// A coroutine, or any other awaitable.
fn awaitable(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(is_coroutine(obj)? || is_awaitable(obj)?)
}

/// `asyncio.iscoroutine(obj)`, without calling it for a native coroutine (the common case).
fn is_coroutine(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = obj.py();
    if obj.get_type().is(COROUTINE_TYPE.import(py, "types", "CoroutineType")?) {
        return Ok(true);
    }
    ISCOROUTINE.import(py, "asyncio", "iscoroutine")?.call1((obj,))?.is_truthy()
}

pub fn is_awaitable(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    ISAWAITABLE.import(obj.py(), "inspect", "isawaitable")?.call1((obj,))?.is_truthy()
}

/// `asyncio.run(awaitable_factory())` on the current (non-loop) thread.
pub fn asyncio_run<'py>(py: Python<'py>, awaitable: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // asyncio.run wants a coroutine; wrap any other awaitable.
    let helper = ASYNCIO_RUN.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let code = c"import asyncio\nasync def _await(a):\n    return await a\ndef run(a):\n    return asyncio.run(_await(a))\n";
        let m = PyModule::from_code(py, code, c"signoff/_bridge.py", c"signoff._bridge")?;
        Ok(m.getattr("run")?.unbind())
    })?;
    helper.bind(py).call1((awaitable,))
}

impl LoopBridge {
    /// The bridge of the loop running on this thread (`RuntimeError` when none runs).
    pub fn current(py: Python<'_>) -> PyResult<Arc<LoopBridge>> {
        if let Some(b) = CURRENT.with(|c| c.borrow().clone())
            && b.runs_here(py)
        {
            return Ok(b);
        }
        let lp = running_loop(py)?;
        if let Some(b) = CURRENT.with(|c| c.borrow().clone())
            && b.event_loop.bind(py).is(&lp)
            && !b.closed.load(Ordering::Acquire)
        {
            return Ok(b);
        }
        let b = LoopBridge::new(py, &lp)?;
        CURRENT.with(|c| *c.borrow_mut() = Some(b.clone()));
        Ok(b)
    }

    /// Whether this bridge's loop is the one running on this thread, known without
    /// `asyncio.get_running_loop()`, which makes a `getpid` system call each time (its check for
    /// a forked child): an asyncio loop records the thread it runs on (`_thread_id`, `None` once
    /// stopped), and forks are counted. `false` when that cannot be told (another loop type):
    /// the caller asks asyncio.
    fn runs_here(&self, py: Python<'_>) -> bool {
        let Some(ident) = self.ident else { return false };
        !self.closed.load(Ordering::Acquire)
            && self.forks == FORKS.load(Ordering::SeqCst)
            && self
                .event_loop
                .bind(py)
                .getattr(pyo3::intern!(py, "_thread_id"))
                .and_then(|t| t.extract::<Option<u64>>())
                .is_ok_and(|t| t == Some(ident))
    }

    fn new(py: Python<'_>, lp: &Bound<'_, PyAny>) -> PyResult<Arc<LoopBridge>> {
        let forks = FORKS.load(Ordering::SeqCst);
        // Only for a loop that says it runs on this thread (asyncio's do).
        let ident = py.import("threading")?.call_method0("get_ident")?.extract::<u64>().ok().filter(|me| {
            lp.getattr("_thread_id").and_then(|t| t.extract::<Option<u64>>()).is_ok_and(|t| t == Some(*me))
        });
        let create_future = lp.getattr("create_future")?.unbind();
        let deque = DEQUE.import(py, "collections", "deque")?;
        let eager_by_hand = py.version_info() < (3, 12)
            && lp.is_instance(BASE_EVENT_LOOP.import(py, "asyncio", "BaseEventLoop")?)?
            && lp.getattr("_ready").is_ok_and(|r| r.get_type().is(deque));
        let quiet_context = pyo3::types::PyDict::new(py);
        quiet_context.set_item("context", py.import("contextvars")?.getattr("Context")?.call0()?)?;
        let quiet_context = quiet_context.unbind();
        let task_kw = pyo3::types::PyDict::new(py);
        task_kw.set_item("loop", lp)?;
        if py.version_info() >= (3, 12) {
            task_kw.set_item("eager_start", true)?;
        }
        let task_kw = task_kw.unbind();
        let force_threadsafe = std::env::var_os("SIGNOFF_PY_BRIDGE").is_some_and(|v| v == "threadsafe");
        #[cfg(unix)]
        if !force_threadsafe {
            let (tx, rx) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| PyRuntimeError::new_err(format!("signoff: cannot create a wake-up socket: {e}")))?;
            tx.set_nonblocking(true).ok();
            rx.set_nonblocking(true).ok();
            use std::os::fd::AsRawFd;
            let fd = rx.as_raw_fd();
            let b = Arc::new(LoopBridge {
                event_loop: lp.clone().unbind(),
                thread: std::thread::current().id(),
                create_future: create_future.clone_ref(py),
                quiet_context: quiet_context.clone_ref(py),
                queue: Mutex::new(Vec::new()),
                wake_pending: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                waker: Waker::Socket { tx, rx },
                ident,
                forks,
                eager_by_hand,
                task_kw: task_kw.clone_ref(py),
            });
            let reader = Drain { bridge: b.clone(), owner: true };
            match lp.call_method1("add_reader", (fd, reader)) {
                Ok(_) => return Ok(b),
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyNotImplementedError>(py) => {
                    // e.g. the Windows proactor loop: fall through to call_soon_threadsafe.
                    b.closed.store(true, Ordering::Release);
                }
                Err(e) => return Err(e),
            }
        }
        let _ = force_threadsafe;
        Ok(Arc::new(LoopBridge {
            event_loop: lp.clone().unbind(),
            thread: std::thread::current().id(),
            create_future,
            quiet_context,
            queue: Mutex::new(Vec::new()),
            wake_pending: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waker: Waker::Threadsafe,
            ident,
            forks,
            eager_by_hand,
            task_kw,
        }))
    }

    /// Queues `job` to run on the loop's thread. Returns false (and drops the job) when the
    /// loop has gone away.
    pub fn post(self: &Arc<Self>, job: Job) -> bool {
        if self.closed.load(Ordering::Acquire) {
            drop(job);
            return false;
        }
        lock(&self.queue).push(job);
        if self.closed.load(Ordering::Acquire) {
            // Closed meanwhile: nobody will run the queue.
            let dropped = std::mem::take(&mut *lock(&self.queue));
            drop(dropped);
            return false;
        }
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            self.wake();
        }
        true
    }

    /// True once the loop has gone away.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Runs `job` now when called on the loop's own thread (the caller is a poll or a callback
    /// of that loop), else queues it like [`post`](Self::post). Returns false (and drops the job)
    /// when the loop has gone away.
    pub fn run_or_post(self: &Arc<Self>, job: Job) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        if std::thread::current().id() == self.thread {
            Python::attach(job);
            return true;
        }
        self.post(job)
    }

    fn wake(self: &Arc<Self>) {
        match &self.waker {
            #[cfg(unix)]
            Waker::Socket { tx, .. } => {
                use std::io::Write;
                // A full socket buffer means a wake-up is already pending.
                let _ = (&*tx).write(&[1u8]);
            }
            Waker::Threadsafe => {
                let b = self.clone();
                runtime().spawn_blocking(move || {
                    let ok = attach_bg(|py| {
                        let drain = Drain { bridge: b.clone(), owner: false };
                        b.event_loop.bind(py).call_method1("call_soon_threadsafe", (drain,)).is_ok()
                    });
                    if ok != Some(true) {
                        b.close_now();
                    }
                });
            }
        }
    }

    fn drain(&self, py: Python<'_>) {
        #[cfg(unix)]
        if let Waker::Socket { rx, .. } = &self.waker {
            use std::io::Read;
            let mut buf = [0u8; 64];
            while let Ok(n) = (&*rx).read(&mut buf) {
                if n < buf.len() {
                    break;
                }
            }
        }
        self.wake_pending.store(false, Ordering::Release);
        let jobs = std::mem::take(&mut *lock(&self.queue));
        for job in jobs {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(py))).is_err() {
                eprintln!("signoff: internal error: a completion panicked");
            }
        }
    }

    /// The loop is gone: drop every queued job (their senders close, their receivers fail safe).
    fn close_now(&self) {
        self.closed.store(true, Ordering::Release);
        let jobs = std::mem::take(&mut *lock(&self.queue));
        drop(jobs);
    }

    /// Runs `aw` as a Task on this loop (`None` when it is not awaitable). A coroutine starts
    /// eagerly: its first step runs now, so one that finishes without waiting is done on return
    /// (`eager_start=True` from Python 3.12 on, [`start_eagerly`](Self::start_eagerly) before).
    /// A loop with a task factory (tracing, `asyncio.eager_task_factory`) makes the Task with it,
    /// as `loop.create_task` does, on every version.
    pub fn start_task<'py>(&self, aw: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = aw.py();
        let coroutine = is_coroutine(aw)?;
        if !coroutine && !is_awaitable(aw)? {
            return Ok(None);
        }
        let lp = self.event_loop.bind(py);
        if coroutine {
            if !lp.call_method0(pyo3::intern!(py, "get_task_factory"))?.is_none() {
                return lp.call_method1(pyo3::intern!(py, "create_task"), (aw,)).map(Some);
            }
            if self.eager_by_hand {
                return self.start_eagerly(aw).map(Some);
            }
        }
        if coroutine && py.version_info() >= (3, 12) {
            return TASK.import(py, "asyncio", "Task")?.call((aw,), Some(self.task_kw.bind(py))).map(Some);
        }
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item(pyo3::intern!(py, "loop"), lp)?;
        ENSURE_FUTURE.import(py, "asyncio", "ensure_future")?.call((aw,), Some(&kw)).map(Some)
    }

    /// Before Python 3.12, on asyncio's own loops without a task factory: a Task for `coro`
    /// whose first step has already run, as `asyncio.Task(coro, eager_start=True)` does from 3.12
    /// on. The Task is created as usual (its copy of the context, its registration,
    /// `current_task()` inside it), then the step it scheduled is taken off the loop's ready
    /// queue and run now, with the calling task set aside meanwhile. Should the last ready handle
    /// not be that step (another thread's callback came after it), it is put back and the Task
    /// starts in the next turn.
    fn start_eagerly<'py>(&self, coro: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = coro.py();
        let lp = self.event_loop.bind(py);
        let task = TASK.import(py, "asyncio", "Task")?.call((coro,), Some(self.task_kw.bind(py)))?;
        let ready = lp.getattr(pyo3::intern!(py, "_ready"))?;
        let Ok(handle) = ready.call_method0(pyo3::intern!(py, "pop")) else {
            return Ok(task);
        };
        let step = match handle.get_type().is(HANDLE_TYPE.import(py, "asyncio.events", "Handle")?) {
            true => handle.getattr(pyo3::intern!(py, "_callback")).ok(),
            false => None,
        };
        let Some(step) =
            step.filter(|step| step.getattr(pyo3::intern!(py, "__self__")).is_ok_and(|owner| owner.is(&task)))
        else {
            ready.call_method1(pyo3::intern!(py, "append"), (handle,))?;
            return Ok(task);
        };
        // `asyncio.current_task(loop)`, which before 3.12 is Python around this dict lookup.
        let current = match CURRENT_TASKS.import(py, "asyncio.tasks", "_current_tasks")?.cast::<pyo3::types::PyDict>() {
            Ok(tasks) => tasks.get_item(lp)?,
            Err(_) => Some(CURRENT_TASK.import(py, "asyncio", "current_task")?.call1((lp,))?),
        };
        let current = current.filter(|t| !t.is_none());
        if let Some(current) = &current {
            LEAVE_TASK.import(py, "asyncio.tasks", "_leave_task")?.call1((lp, current))?;
        }
        // What `Handle._run` does, less its report of an exception: a Task's step raises only
        // `SystemExit` or `KeyboardInterrupt`, which `_run` lets through too.
        let ran = handle
            .getattr(pyo3::intern!(py, "_context"))
            .and_then(|c| c.call_method1(pyo3::intern!(py, "run"), (step,)));
        if let Some(current) = &current {
            ENTER_TASK.import(py, "asyncio.tasks", "_enter_task")?.call1((lp, current))?;
        }
        ran.map(|_| task)
    }

    /// A new `asyncio.Future` on this loop.
    pub fn create_future<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.create_future.bind(py).call0()
    }
}

/// The loop's reader callback: runs the queued jobs.
#[pyclass(module = "signoff._native", frozen)]
struct Drain {
    bridge: Arc<LoopBridge>,
    /// Registered with `add_reader`: when the loop drops it (closed), the bridge is closed.
    owner: bool,
}

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        self.bridge.drain(py);
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if self.owner {
            self.bridge.close_now();
        }
    }
}

/// A core future driven by an event loop: polled on the loop's thread, woken from any thread.
trait Driven: Send + Sync {
    fn poll_now(self: Arc<Self>, py: Python<'_>);
    fn bridge(&self) -> Arc<LoopBridge>;
    /// Drops the core future now (on the loop's thread): the core cancels what it waited for.
    fn cancel(&self, py: Python<'_>);
}

struct DrivenTask<F: Future, D> {
    bridge: Arc<LoopBridge>,
    /// The core future and what to do with its output; `None` once finished or cancelled.
    state: Mutex<Option<(std::pin::Pin<Box<F>>, D)>>,
    target: Py<PyAny>,
    scheduled: AtomicBool,
    /// Poll without the GIL: the future may wait for a database round trip (a shared store).
    detached: bool,
    /// The [`CancelOnCancel`] callback on `target`, while the core future runs: removed before
    /// the result is set, so the loop does not call it for nothing (a callback per call).
    cancel_cb: Mutex<Option<Py<PyAny>>>,
}

impl<F, T, D> std::task::Wake for DrivenTask<F, D>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    D: FnOnce(Python<'_>, T, bool) -> Option<PyResult<Py<PyAny>>> + Send + 'static,
{
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if self.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let me: Arc<dyn Driven> = self.clone();
        // On the loop's own thread inside `polling_woken`: polled when that section ends.
        let deferred = std::thread::current().id() == self.bridge.thread
            && WOKEN.with(|w| w.borrow_mut().as_mut().map(|v| v.push(me.clone())).is_some());
        if !deferred && !self.bridge.post(Box::new(move |py| me.poll_now(py))) {
            // The loop has gone (closed with this call still waiting): nobody will poll it again.
            // Dropping its core future cancels the request (`aborted`), which would otherwise
            // stay pending, its deadline passed, until the gate closed. (Not while a poll holds
            // the state: that poll returns, and the next wake-up comes here again.)
            let taken = match self.state.try_lock() {
                Ok(mut state) => state.take(),
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().take(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    // Not scheduled after all: the next wake-up tries again.
                    self.scheduled.store(false, Ordering::Release);
                    None
                }
            };
            drop(lock(&self.cancel_cb).take());
            drop(taken);
        }
    }
}

impl<F, T, D> Driven for DrivenTask<F, D>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    D: FnOnce(Python<'_>, T, bool) -> Option<PyResult<Py<PyAny>>> + Send + 'static,
{
    fn poll_now(self: Arc<Self>, py: Python<'_>) {
        polling_woken(py, || self.poll_here(py));
    }

    fn bridge(&self) -> Arc<LoopBridge> {
        self.bridge.clone()
    }

    fn cancel(&self, py: Python<'_>) {
        drop(lock(&self.cancel_cb).take());
        let taken = lock(&self.state).take();
        if self.detached {
            // Cancelling a request in a shared store is a database round trip.
            py.detach(|| drop(taken));
        } else {
            drop(taken);
        }
    }
}

impl<F, T, D> DrivenTask<F, D>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    D: FnOnce(Python<'_>, T, bool) -> Option<PyResult<Py<PyAny>>> + Send + 'static,
{
    fn poll_here(self: Arc<Self>, py: Python<'_>) {
        self.scheduled.store(false, Ordering::Release);
        // After the first poll (the done-callback is on): the caller may have cancelled the
        // asyncio future in this same turn of the loop, and the callback that drops the core
        // future runs in a later one. Never poll on its behalf meanwhile: an answer given in
        // between would run the tool for a caller that has stopped waiting.
        if lock(&self.cancel_cb).is_some()
            && self.target.bind(py).call_method0(pyo3::intern!(py, "done")).and_then(|d| d.is_truthy()).unwrap_or(false)
        {
            self.cancel(py);
            return;
        }
        let mut state = lock(&self.state);
        let Some((fut, _)) = state.as_mut() else { return };
        let waker = std::task::Waker::from(self.clone());
        let mut poll = || {
            let _rt = runtime().enter();
            CALLER.sync_scope(self.bridge.clone(), || fut.as_mut().poll(&mut std::task::Context::from_waker(&waker)))
        };
        // A shared store's operations block for a round trip: let other Python threads run.
        // (Inline approvers and executors take the GIL back themselves.)
        let polled = if self.detached { py.detach(poll) } else { poll() };
        let std::task::Poll::Ready(out) = polled else { return };
        let Some((fut, deliver)) = state.take() else { return };
        drop(state);
        drop(fut);
        let target = self.target.bind(py);
        let wanted = !target.call_method0(pyo3::intern!(py, "done")).and_then(|d| d.is_truthy()).unwrap_or(true);
        if let Some(cb) = lock(&self.cancel_cb).take()
            && wanted
        {
            // Nothing left to cancel: spare the loop calling it once the result is set.
            let _ = target.call_method1(pyo3::intern!(py, "remove_done_callback"), (cb,));
        }
        if let Some(r) = deliver(py, out, wanted)
            && wanted
        {
            settle(py, target, r);
        }
    }
}

/// Runs `f` (on a loop's thread, with the GIL: a poll, a loop callback, an answer). Tasks of
/// this thread's loop woken meanwhile (an answer wakes the call that waits for it, a request the
/// stream that shows it) are polled as soon as the outermost such section ends, rather than in
/// a later turn of the loop through its wake-up socket.
pub fn polling_woken<R>(py: Python<'_>, f: impl FnOnce() -> R) -> R {
    let outer = WOKEN.with(|w| {
        let mut w = w.borrow_mut();
        w.is_none().then(|| *w = Some(Vec::new())).is_some()
    });
    if !outer {
        return f();
    }
    /// Ends the section: what is still woken (also after a panic) goes through the loop.
    struct Section;
    impl Drop for Section {
        fn drop(&mut self) {
            for t in WOKEN.with(|w| w.borrow_mut().take()).unwrap_or_default() {
                t.bridge().post(Box::new(move |py| t.poll_now(py)));
            }
        }
    }
    let _section = Section;
    let r = f();
    // Bounded: a task that keeps waking itself goes through the loop after a while.
    for _ in 0..64 {
        let woken = WOKEN.with(|w| w.borrow_mut().as_mut().map(std::mem::take)).unwrap_or_default();
        if woken.is_empty() {
            break;
        }
        woken.into_iter().for_each(|t| t.poll_now(py));
    }
    r
}

/// Drops the core future when the asyncio future it feeds is cancelled.
#[pyclass(module = "signoff._native", frozen)]
struct CancelOnCancel {
    task: Arc<dyn Driven>,
}

#[pymethods]
impl CancelOnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0(pyo3::intern!(fut.py(), "cancelled"))?.is_truthy()? {
            polling_woken(fut.py(), || self.task.cancel(fut.py()));
        }
        Ok(())
    }
}

fn settle(py: Python<'_>, target: &Bound<'_, PyAny>, r: PyResult<Py<PyAny>>) {
    let res = match r {
        Ok(v) => target.call_method1(pyo3::intern!(py, "set_result"), (v,)),
        Err(e) => target.call_method1(pyo3::intern!(py, "set_exception"), (e.into_value(py),)),
    };
    if let Err(e) = res {
        e.write_unraisable(py, Some(target));
    }
}

/// Drives a core future from the running event loop and returns an `asyncio.Future` of it.
///
/// The future is polled on the loop's thread (first right away, so a call that needs no approval
/// returns an already-completed future without any thread hop) inside the tokio runtime's
/// context; whoever wakes it (a tokio thread answering, a timer) queues a poll on the loop.
/// Cancelling the asyncio future drops the core future at once, on the loop's thread.
/// `deliver(py, output, wanted)` gets `wanted == false` when the asyncio future was cancelled
/// meanwhile (it may keep the output) and returns the result, or `None` to leave it.
/// `detached`: poll without the GIL (for a gate on a shared store, whose polls may wait for the
/// database).
pub fn spawn_with<'py, F, T, D>(py: Python<'py>, fut: F, deliver: D, detached: bool) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    D: FnOnce(Python<'_>, T, bool) -> Option<PyResult<Py<PyAny>>> + Send + 'static,
{
    let bridge = LoopBridge::current(py)?;
    let target = bridge.create_future(py)?;
    let quiet = bridge.quiet_context.clone_ref(py);
    let task = Arc::new(DrivenTask {
        bridge,
        state: Mutex::new(Some((Box::pin(fut), deliver))),
        target: target.clone().unbind(),
        scheduled: AtomicBool::new(false),
        detached,
        cancel_cb: Mutex::new(None),
    });
    task.clone().poll_now(py);
    if lock(&task.state).is_some() {
        let cb = Py::new(py, CancelOnCancel { task: task.clone() })?.into_any();
        *lock(&task.cancel_cb) = Some(cb.clone_ref(py));
        target.call_method(pyo3::intern!(py, "add_done_callback"), (cb,), Some(quiet.bind(py)))?;
    }
    Ok(target)
}

/// [`spawn_with`] for the common case: convert the output when someone still waits for it.
pub fn spawn<'py, F, T, C>(py: Python<'py>, fut: F, convert: C, detached: bool) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    spawn_with(py, fut, move |py, out, wanted| if wanted { Some(convert(py, out)) } else { None }, detached)
}

/// Runs `fut` to completion from synchronous code: polled on this thread (so the core's inline
/// approvers run here) inside the runtime's context, without the GIL. Signals are checked at
/// least every 100 ms: a `KeyboardInterrupt` drops `fut` (and so cancels what it was waiting
/// for) before it propagates. Refuses to run on a thread with a running event loop, which it
/// would block.
pub fn block_on<F, T>(py: Python<'_>, what: &str, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    block_on_timeout(py, what, fut, None)?.ok_or_else(|| PyTimeoutError::new_err(format!("{what} timed out")))
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// [`block_on`] with an optional timeout in seconds: `Ok(None)` when it passes (`fut` is dropped).
pub fn block_on_timeout<F, T>(py: Python<'_>, what: &str, fut: F, timeout: Option<f64>) -> PyResult<Option<T>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    if loop_running_here(py) {
        return Err(PyRuntimeError::new_err(format!(
            "{what} would block the running event loop; await the async variant instead"
        )));
    }
    let deadline = match timeout {
        // Beyond what a clock can count (1e30 s, say): no deadline, as for +inf.
        Some(t) if t.is_finite() && t >= 0.0 => {
            Duration::try_from_secs_f64(t).ok().and_then(|d| std::time::Instant::now().checked_add(d))
        }
        Some(t) if t.is_nan() || t < 0.0 => {
            return Err(pyo3::exceptions::PyValueError::new_err("timeout must be a non-negative number"));
        }
        _ => None,
    };
    let mut fut = Box::pin(fut);
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    loop {
        let polled = py.detach(|| {
            let _rt = runtime().enter();
            fut.as_mut().poll(&mut std::task::Context::from_waker(&waker))
        });
        if let std::task::Poll::Ready(v) = polled {
            return Ok(Some(v));
        }
        let mut step = Duration::from_millis(100);
        if let Some(d) = deadline {
            step = step.min(d.saturating_duration_since(std::time::Instant::now()));
            if step.is_zero() {
                py.detach(|| drop(fut));
                return Ok(None);
            }
        }
        py.detach(|| std::thread::park_timeout(step));
        if let Err(e) = py.check_signals() {
            py.detach(|| drop(fut));
            return Err(e);
        }
    }
}

/// Pins a closure's signature to `for<'py> FnOnce(Python<'py>) -> PyResult<Made<'py>>`.
pub fn made<M>(m: M) -> M
where
    M: for<'py> FnOnce(Python<'py>) -> PyResult<Made<'py>>,
{
    m
}

/// What became of a Python call made on a loop's thread.
pub type Finish<R> = Box<dyn FnOnce(Python<'_>, PyResult<Bound<'_, PyAny>>) -> Result<R, String> + Send>;

/// Called once with a Task's outcome.
type OnDone = Box<dyn FnOnce(Python<'_>, PyResult<Bound<'_, PyAny>>) + Send>;

/// Settles a Rust oneshot from an asyncio Task's completion.
#[pyclass(module = "signoff._native", frozen)]
struct Completer {
    done: Mutex<Option<OnDone>>,
    /// The Task whose done-callback this is, when it is one that also delivers through
    /// [`deliver`](Completer::deliver) (see [`call_on_loop`]): a weak reference, so that a Task
    /// that never ends is not kept alive by the callback it holds.
    task: Mutex<Option<Py<pyo3::types::PyWeakrefReference>>>,
}

#[pymethods]
impl Completer {
    /// The Task's done-callback.
    fn __call__(&self, task: &Bound<'_, PyAny>) {
        let py = task.py();
        drop(lock(&self.task).take());
        // Delivered already (from the Task's last step): nothing to read.
        let Some(f) = lock(&self.done).take() else { return };
        let r = match task.call_method0("cancelled").and_then(|c| c.is_truthy()) {
            Ok(true) => Err(pyo3::exceptions::asyncio::CancelledError::new_err("the task was cancelled")),
            _ => task.call_method0("result"),
        };
        polling_woken(py, || f(py, r));
    }

    /// The outcome, from inside the Task's last step (`signoff._tasks.run_then`): delivered at
    /// once, and the done-callback that would have delivered it is removed.
    fn deliver(slf: &Bound<'_, Self>, result: Bound<'_, PyAny>, error: Option<Bound<'_, PyAny>>) {
        let py = slf.py();
        let this = slf.get();
        let Some(f) = lock(&this.done).take() else { return };
        let task = lock(&this.task).take().and_then(|t| t.bind(py).upgrade());
        if let Some(task) = task
            && let Err(e) = task.call_method1(pyo3::intern!(py, "remove_done_callback"), (slf,))
        {
            e.write_unraisable(py, None);
        }
        let r = match error {
            None => Ok(result),
            Some(e) if e.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>() => {
                Err(pyo3::exceptions::asyncio::CancelledError::new_err("the task was cancelled"))
            }
            Some(e) => Err(PyErr::from_value(e)),
        };
        polling_woken(py, || f(py, r));
    }
}

/// Calls `callback(task)` now if `task` is done (it finished in its eager first step), else when
/// it is.
pub fn when_done<'py, C: pyo3::PyClass + Into<pyo3::PyClassInitializer<C>>>(
    task: &Bound<'py, PyAny>,
    callback: C,
) -> PyResult<()> {
    let py = task.py();
    let callback = Bound::new(py, callback)?;
    if task.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
        callback.as_any().call1((task,))?;
        return Ok(());
    }
    task.call_method1(pyo3::intern!(py, "add_done_callback"), (callback,)).map(drop)
}

/// What [`call_on_loop`]'s `make` gives: a value or an awaitable, and the `CallContext` the Task
/// that awaits it sets as `signoff.current_call()` in its own context (`None`: leaves it alone).
pub type Made<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// Calls `make` on the loop's thread (at once when already there); if it returns an awaitable,
/// runs it as a Task on that loop. `finish` turns the outcome (value or exception) into `R`, on
/// the loop's thread with the GIL. The Task is not cancelled when the returned future is
/// dropped: a started tool runs to the end. `Err` when the loop went away.
pub async fn call_on_loop<R, M>(bridge: Arc<LoopBridge>, make: M, finish: Finish<R>) -> Result<R, String>
where
    R: Send + 'static,
    M: for<'py> FnOnce(Python<'py>) -> PyResult<Made<'py>> + Send + 'static,
{
    let (tx, rx) = oneshot::channel::<Result<R, String>>();
    let b = bridge.clone();
    let posted = bridge.run_or_post(Box::new(move |py| {
        let send = move |py: Python<'_>, r: PyResult<Bound<'_, PyAny>>| {
            let _ = tx.send(finish(py, r));
        };
        let (value, current) = match make(py) {
            Ok(made) => made,
            Err(e) => return send(py, Err(e)),
        };
        match awaitable(&value) {
            Ok(true) => {}
            Ok(false) => return send(py, Ok(value)),
            Err(e) => return send(py, Err(e)),
        }
        let completer =
            match Bound::new(py, Completer { done: Mutex::new(Some(Box::new(send))), task: Mutex::new(None) }) {
                Ok(c) => c,
                Err(e) => return e.write_unraisable(py, None),
            };
        // The Task's body hands the outcome over at the end of its last step; the done-callback
        // is there for a Task that ends without running it (cancelled before it started).
        let started = RUN_THEN
            .import(py, "signoff._tasks", "run_then")
            .and_then(|run_then| {
                completer.getattr(pyo3::intern!(py, "deliver")).and_then(|d| run_then.call1((value, d, current)))
            })
            .and_then(|body| b.start_task(&body))
            .and_then(|task| task.ok_or_else(|| PyRuntimeError::new_err("run_then is not a coroutine")));
        let task = match started {
            Ok(t) => t,
            Err(e) => {
                let f = lock(&completer.get().done).take();
                if let Some(f) = f {
                    f(py, Err(e));
                }
                return;
            }
        };
        if lock(&completer.get().done).is_none() {
            return; // finished in its eager first step, and delivered
        }
        let registered = task.call_method0(pyo3::intern!(py, "done")).and_then(|d| d.is_truthy()).and_then(|done| {
            if done {
                // Ended in its eager first step without delivering (cancelled before it ran).
                completer.call1((&task,)).map(drop)
            } else {
                *lock(&completer.get().task) = Some(pyo3::types::PyWeakrefReference::new(&task)?.unbind());
                task.call_method1(pyo3::intern!(py, "add_done_callback"), (&completer,)).map(drop)
            }
        });
        if let Err(e) = registered {
            e.write_unraisable(py, Some(&task));
        }
    }));
    if !posted {
        return Err("its event loop is closed".into());
    }
    rx.await.unwrap_or_else(|_| Err("its event loop closed before it finished".into()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let f = wrap_pyfunction!(at_exit, m)?;
    py.import("atexit")?.call_method1("register", (f,))?;
    let kw = pyo3::types::PyDict::new(py);
    kw.set_item("after_in_child", wrap_pyfunction!(after_fork_in_child, m)?)?;
    // Not on every platform (Windows has no fork).
    if let Ok(register) = py.import("os")?.getattr("register_at_fork") {
        register.call((), Some(&kw))?;
    }
    Ok(())
}
