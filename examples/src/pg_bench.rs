//! Benchmarks of the PostgreSQL store across processes (release build; figures in BENCHMARKS.md).
//!
//! ```text
//! signoff-pg-bench latency [--requests 1000]
//! signoff-pg-bench throughput [--agents 2] [--gates 1] [--inflight 64] [--approvers 1] [--approver-gates 1]
//!                             [--approver-threads 16] [--decisions 20000] [--warmup 2000] [--mode execute|confirm]
//! ```
//!
//! Needs `SIGNOFF_TEST_POSTGRES_URL` (`scripts/with-postgres.sh` sets it); each run uses a fresh
//! schema `t_<random>`.
//!
//! - `latency`: one agent process makes gated `confirm` calls one at a time; one approver process
//!   polls the pending requests and approves each. The approver takes the time (µs since the
//!   epoch: same machine, same clock) just before `respond` and right after it returned `Ok` (the
//!   decision is committed); the agent takes the time when the gate published the resolution on its
//!   bus (an observer subscription) and when its `confirm` future returned. Wake latency is
//!   measured from `respond`'s return (and, as an upper bound, from its start).
//! - `throughput`: `--agents` processes with `--gates` gates each (each gate its own store and
//!   connections, owner names distinct) keep `--inflight` calls per process going; `--approvers`
//!   processes page through the pending requests (with their first gate) and approve them with
//!   `--approver-threads` threads sharing `--approver-gates` gates round-robin. The defaults are
//!   a deployment's shape: one gate per process. Decisions/s is counted by the database over `--decisions`
//!   decisions after `--warmup`; CPU per process (from /proc), PostgreSQL's backends' CPU, commits
//!   and WAL fsyncs (pg_stat_database, pg_stat_wal) over the same window say what limited it.

#[path = "pg_common.rs"]
mod pg_common;
use pg_common::{Args, Res, now_us, runtime, url};
use serde_json::json;
use signoff::{
    ApprovalMode, ConfirmationRequest, ConfirmationResponse, Event, Gate, PendingCursor, PostgresOptions,
    PostgresStore, Tool, ToolCall,
};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOOL: &str = "bench_tool";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = Args(argv.iter().skip(1).cloned().collect());
    let r = match argv.first().map(String::as_str) {
        Some("latency") => latency(&args),
        Some("throughput") => throughput(&args),
        Some("latency-agent") => latency_agent(&args),
        Some("latency-approver") => latency_approver(&args),
        Some("agent") => load_agent(&args),
        Some("approver") => load_approver(&args),
        _ => Err("usage: signoff-pg-bench latency [--requests N] | throughput [--agents K] [--gates G] \
                  [--inflight M] [--approvers A] [--approver-gates G] [--approver-threads T] \
                  [--decisions D] [--warmup W] [--mode execute|confirm]"
            .into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("signoff-pg-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn fresh_schema() -> String {
    let mut b = [0u8; 8];
    if let Ok(mut f) = File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    format!("t_{:016x}", u64::from_le_bytes(b) ^ now_us())
}

fn store(url: &str, schema: &str, owner: Option<String>) -> Res<Arc<PostgresStore>> {
    PostgresStore::connect(
        url,
        PostgresOptions { owner, schema: Some(schema.to_owned()), sweep_interval: None, operation_timeout: None },
    )
    .map_err(|e| format!("cannot connect: {e}"))
}

fn tool() -> Tool {
    Tool::builder(TOOL)
        .parameters(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
        .approval(ApprovalMode::Required)
        .timeout(Duration::from_secs(120))
        .executor(|a| async move { Ok(json!({"n": a["n"]})) })
        .build()
}

fn gate(url: &str, schema: &str, owner: Option<String>) -> Res<Gate> {
    Gate::builder()
        .store(store(url, schema, owner)?)
        .deny_when_unobserved(false)
        .tool(tool())
        .build()
        .map_err(|e| e.to_string())
}

fn spawn(role: &str, args: &[String], out: &Path) -> Res<Child> {
    let f = File::create(out).map_err(|e| e.to_string())?;
    Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .arg(role)
        .args(args)
        .stdin(Stdio::null())
        .stdout(f.try_clone().map_err(|e| e.to_string())?)
        .stderr(f)
        .spawn()
        .map_err(|e| format!("cannot start {role}: {e}"))
}

fn percentiles(label: &str, v: &mut [i64]) -> String {
    v.sort_unstable();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize] as f64 / 1000.0;
    format!(
        "{label:<44} p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  (n={})",
        p(0.5),
        p(0.9),
        p(0.99),
        v[v.len() - 1] as f64 / 1000.0,
        v.len()
    )
}

// ---------------------------------------------------------------------------------------------
// latency

fn latency(a: &Args) -> Res<()> {
    let url = url()?;
    let n = a.num("--requests", 1000)?;
    let schema = fresh_schema();
    let dir = std::env::temp_dir().join(format!("signoff-pg-bench-{schema}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    drop(store(&url, &schema, None)?);
    let common = ["--schema".to_owned(), schema.clone(), "--dir".into(), dir.display().to_string()];
    let mut approver = spawn(
        "latency-approver",
        &[&common[..], &["--requests".into(), n.to_string()]].concat(),
        &dir.join("approver.out"),
    )?;
    let mut agent =
        spawn("latency-agent", &[&common[..], &["--requests".into(), n.to_string()]].concat(), &dir.join("agent.out"))?;
    let st = agent.wait().map_err(|e| e.to_string())?;
    let st2 = approver.wait().map_err(|e| e.to_string())?;
    if !st.success() || !st2.success() {
        return Err(format!("agent {st}, approver {st2}: see {}", dir.display()));
    }
    let read = |f: &str| -> Res<HashMap<String, (i64, i64)>> {
        let text = std::fs::read_to_string(dir.join(f)).map_err(|e| e.to_string())?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                Some((w.first()?.to_string(), (w.get(1)?.parse().ok()?, w.get(2)?.parse().ok()?)))
            })
            .collect())
    };
    let agent_t = read("agent.times")?;
    let approver_t = read("approver.times")?;
    let (mut wake, mut wake_event, mut wake_from_start, mut respond) = (vec![], vec![], vec![], vec![]);
    for (id, (before, after)) in &approver_t {
        respond.push(after - before);
        if let Some((event, returned)) = agent_t.get(id) {
            wake.push(returned - after);
            wake_event.push(event - after);
            wake_from_start.push(returned - before);
        }
    }
    if wake.is_empty() {
        return Err("no request was both answered and returned".into());
    }
    println!("pg-bench latency: {n} sequential requests, agent and approver in separate processes (schema {schema})");
    println!("{}", percentiles("wake: respond returned -> confirm returned", &mut wake));
    println!("{}", percentiles("wake: respond returned -> resolved on the bus", &mut wake_event));
    println!("{}", percentiles("wake: respond started -> confirm returned", &mut wake_from_start));
    println!("{}", percentiles("respond (approver's call, one commit)", &mut respond));
    let negative = wake.iter().filter(|w| **w < 0).count();
    println!("  (negative: the agent woke before the approver's `respond` returned: {negative} of {})", wake.len());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn latency_agent(a: &Args) -> Res<()> {
    let url = url()?;
    let (schema, dir, n) = (a.req("--schema")?.to_owned(), PathBuf::from(a.req("--dir")?), a.num("--requests", 1000)?);
    let rt = runtime(2)?;
    rt.block_on(async move {
        let gate = gate(&url, &schema, None)?;
        // When the decision reaches this process's gate (before `confirm` records `released`).
        let events: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
        let mut sub = gate.observe();
        let ev = events.clone();
        tokio::spawn(async move {
            while let Some(Ok(e)) = sub.recv().await {
                if let Event::ConfirmationResolved(r) = e {
                    let t = now_us();
                    ev.lock().unwrap_or_else(|e| e.into_inner()).insert(r.id.to_string(), t);
                }
            }
        });
        let mut out = String::new();
        for i in 0..n {
            let d = gate.confirm(ToolCall::new(TOOL, json!({"n": i}))).await.map_err(|e| e.to_string())?;
            let t = now_us();
            if !d.is_approved() {
                return Err(format!("request {i} was not approved: {d:?}"));
            }
            let id = d.request_id().map(|u| u.to_string()).unwrap_or_default();
            tokio::time::sleep(Duration::from_millis(1)).await;
            let ev = events.lock().unwrap_or_else(|e| e.into_inner()).get(&id).copied().unwrap_or(t);
            out.push_str(&format!("{id} {ev} {t}\n"));
        }
        std::fs::write(dir.join("agent.times"), out).map_err(|e| e.to_string())?;
        Ok(())
    })
}

fn latency_approver(a: &Args) -> Res<()> {
    let url = url()?;
    let (schema, dir, n) = (a.req("--schema")?.to_owned(), PathBuf::from(a.req("--dir")?), a.num("--requests", 1000)?);
    let rt = runtime(2)?;
    let _guard = rt.enter();
    let gate = gate(&url, &schema, None)?;
    let mut out = String::new();
    let mut answered = 0;
    let give_up = Instant::now() + Duration::from_secs(600);
    while answered < n && Instant::now() < give_up {
        let page = gate.pending_page(None, 10);
        if page.requests.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        for req in page.requests {
            let before = now_us();
            gate.respond(ConfirmationResponse::approve(&req)).map_err(|e| e.to_string())?;
            let after = now_us();
            out.push_str(&format!("{} {before} {after}\n", req.id));
            answered += 1;
        }
    }
    std::fs::write(dir.join("approver.times"), out).map_err(|e| e.to_string())?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// throughput

fn load_agent(a: &Args) -> Res<()> {
    let url = url()?;
    let schema = a.req("--schema")?.to_owned();
    let dir = PathBuf::from(a.req("--dir")?);
    let k = a.req("--index")?.to_owned();
    let gates = a.num("--gates", 1)? as usize;
    let inflight = a.num("--inflight", 64)? as usize;
    let confirm_only = a.get("--mode") == Some("confirm");
    // Store calls block their thread for a round trip: one thread per call in flight.
    let rt = runtime(inflight + 2)?;
    rt.block_on(async move {
        let gs: Vec<Gate> =
            (0..gates).map(|g| gate(&url, &schema, Some(format!("bench-{k}-{g}")))).collect::<Res<_>>()?;
        let stop = dir.join("stop");
        let mut set = tokio::task::JoinSet::new();
        for slot in 0..inflight {
            let g = gs[slot % gates].clone();
            let stop = stop.clone();
            set.spawn(async move {
                let mut i = 0u64;
                let mut failed = 0u64;
                while !stop.exists() {
                    i += 1;
                    let call = ToolCall::new(TOOL, json!({"n": i}));
                    let ok = if confirm_only {
                        g.confirm(call).await.is_ok_and(|d| d.is_approved())
                    } else {
                        g.execute(call).await.status == signoff::ToolStatus::Executed
                    };
                    if !ok {
                        failed += 1;
                    }
                }
                failed
            });
        }
        let mut failed = 0;
        while let Some(r) = set.join_next().await {
            failed += r.unwrap_or(0);
        }
        println!("agent {k}: {failed} call(s) not executed");
        for g in gs {
            g.close();
        }
        Ok(())
    })
}

fn load_approver(a: &Args) -> Res<()> {
    let url = url()?;
    let schema = a.req("--schema")?.to_owned();
    let dir = PathBuf::from(a.req("--dir")?);
    let index = a.num("--index", 0)? as usize;
    let of = a.num("--of", 1)?.max(1) as usize;
    let n_gates = a.num("--gates", 1)?.max(1) as usize;
    let workers = a.num("--threads", 16)?.max(1) as usize;
    let rt = runtime(2)?;
    let _guard = rt.enter();
    // The first gate also pages; the answering threads share the gates round-robin.
    let gates: Vec<Gate> = (0..n_gates).map(|_| gate(&url, &schema, None)).collect::<Res<_>>()?;
    let pager = gates[0].clone();
    let stop = dir.join("stop-approver");
    let mut txs = Vec::new();
    let mut threads = Vec::new();
    for t in 0..workers {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<ConfirmationRequest>>();
        txs.push(tx);
        let g = gates[t % n_gates].clone();
        threads.push(std::thread::spawn(move || {
            let (mut ok, mut lost) = (0u64, 0u64);
            while let Ok(req) = rx.recv() {
                match g.respond(ConfirmationResponse::approve(&req)) {
                    Ok(_) => ok += 1,
                    Err(_) => lost += 1,
                }
            }
            (ok, lost)
        }));
    }
    // One pager hands each new request to a worker; a request stays listed until its answer commits,
    // so the ids handed out are remembered.
    // Pages continue after the newest request seen; every 100 ms from the oldest again (a request
    // created earlier may commit later).
    let mut seen: HashSet<String> = HashSet::new();
    let mut next = 0usize;
    let mut after: Option<PendingCursor> = None;
    let mut rescan = Instant::now();
    while !stop.exists() {
        if rescan.elapsed() > Duration::from_millis(100) {
            after = None;
            rescan = Instant::now();
        }
        let page = pager.pending_page(after.as_ref(), 500);
        if let Some(last) = page.requests.last() {
            after = Some(PendingCursor::of(last));
        }
        let mut fresh = 0;
        for req in page.requests {
            if req.id.as_bytes()[15] as usize % of != index || !seen.insert(req.id.to_string()) {
                continue;
            }
            fresh += 1;
            let _ = txs[next % workers].send(req);
            next += 1;
        }
        if fresh == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(txs);
    let (mut ok, mut lost) = (0, 0);
    for t in threads {
        let (o, l) = t.join().map_err(|_| "a worker panicked")?;
        ok += o;
        lost += l;
    }
    println!("approver {index}: {ok} approved, {lost} refused");
    Ok(())
}

/// CPU time (user + system, in clock ticks) of a process.
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some(rest) = s.rsplit_once(')').map(|(_, r)| r) else { return 0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the command: state is [0], utime [11], stime [12].
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
}

/// CPU ticks of every PostgreSQL server process (backends, WAL writer, checkpointer, ...).
fn postgres_ticks() -> u64 {
    let Ok(rd) = std::fs::read_dir("/proc") else { return 0 };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .map(cpu_ticks)
        .sum()
}

/// (busy, iowait, total) ticks of the whole machine.
fn machine_ticks() -> (u64, u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> =
        s.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0);
    let iowait = v.get(4).copied().unwrap_or(0);
    (total - idle - iowait, iowait, total)
}

struct Sample {
    at: Instant,
    decided: i64,
    done: i64,
    agents: u64,
    approvers: u64,
    postgres: u64,
    machine: (u64, u64, u64),
    commits: i64,
    wal_syncs: i64,
    /// Backends waiting, at this instant, for the lock PostgreSQL serializes NOTIFYing commits with.
    notify_lock_waiters: i64,
    /// Backends in a WAL write or sync, at this instant.
    wal_waiters: i64,
}

async fn sample(c: &tokio_postgres::Client, agents: &[Child], approvers: &[Child]) -> Res<Sample> {
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE state <> 'pending'), count(*) FILTER (WHERE state IN ('done', 'released')),
                    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                    (SELECT wal_sync FROM pg_stat_wal),
                    (SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND classid = 'pg_database'::regclass
                       AND NOT granted),
                    (SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'WALSync' OR wait_event = 'WALWrite')
             FROM signoff_requests",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(Sample {
        at: Instant::now(),
        decided: row.get(0),
        done: row.get(1),
        commits: row.get(2),
        wal_syncs: row.get(3),
        notify_lock_waiters: row.get(4),
        wal_waiters: row.get(5),
        agents: agents.iter().map(|c| cpu_ticks(c.id())).sum(),
        approvers: approvers.iter().map(|c| cpu_ticks(c.id())).sum(),
        postgres: postgres_ticks(),
        machine: machine_ticks(),
    })
}

fn throughput(a: &Args) -> Res<()> {
    let url = url()?;
    let n_agents = a.num("--agents", 2)?;
    let gates = a.num("--gates", 1)?;
    let inflight = a.num("--inflight", 64)?;
    let n_approvers = a.num("--approvers", 1)?;
    let approver_gates = a.num("--approver-gates", 1)?;
    let approver_threads = a.num("--approver-threads", 16)?;
    let decisions = a.num("--decisions", 20_000)? as i64;
    let warmup = a.num("--warmup", 2000)? as i64;
    let mode = a.get("--mode").unwrap_or("execute").to_owned();
    let schema = fresh_schema();
    let dir = std::env::temp_dir().join(format!("signoff-pg-bench-{schema}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    drop(store(&url, &schema, None)?);
    let common = ["--schema".to_owned(), schema.clone(), "--dir".into(), dir.display().to_string()];
    let mut approvers = Vec::new();
    for j in 0..n_approvers {
        let extra = [
            "--index",
            &j.to_string(),
            "--of",
            &n_approvers.to_string(),
            "--gates",
            &approver_gates.to_string(),
            "--threads",
            &approver_threads.to_string(),
        ]
        .map(str::to_owned);
        approvers.push(spawn("approver", &[&common[..], &extra].concat(), &dir.join(format!("approver-{j}.out")))?);
    }
    let mut agents = Vec::new();
    for k in 0..n_agents {
        let extra = [
            "--index",
            &k.to_string(),
            "--gates",
            &gates.to_string(),
            "--inflight",
            &inflight.to_string(),
            "--mode",
            &mode,
        ]
        .map(str::to_owned);
        agents.push(spawn("agent", &[&common[..], &extra].concat(), &dir.join(format!("agent-{k}.out")))?);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let result = rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        c.batch_execute(&format!("SET search_path TO {schema}")).await.map_err(|e| e.to_string())?;
        let give_up = Instant::now() + Duration::from_secs(600);
        let waits = std::cell::RefCell::new((0i64, 0i64, 0i64));
        let wait_for = |n: i64| {
            let c = &c;
            let (agents, approvers, waits) = (&agents, &approvers, &waits);
            async move {
                loop {
                    let s = sample(c, agents, approvers).await?;
                    {
                        let mut w = waits.borrow_mut();
                        w.0 += 1;
                        w.1 += s.notify_lock_waiters;
                        w.2 += s.wal_waiters;
                    }
                    if s.decided >= n {
                        return Ok::<Sample, String>(s);
                    }
                    if Instant::now() > give_up {
                        return Err(format!("only {} decisions after 600 s", s.decided));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let s0 = wait_for(warmup).await?;
        *waits.borrow_mut() = (0, 0, 0);
        let s1 = wait_for(s0.decided + decisions).await?;
        let w = *waits.borrow();
        Ok::<(Sample, Sample, (i64, i64, i64)), String>((s0, s1, w))
    });
    // Agents first (their calls in flight still get answered), then the approvers.
    File::create(dir.join("stop")).map_err(|e| e.to_string())?;
    for c in agents.iter_mut() {
        let _ = c.wait();
    }
    File::create(dir.join("stop-approver")).map_err(|e| e.to_string())?;
    for c in approvers.iter_mut() {
        let _ = c.wait();
    }
    let (s0, s1, waits) = result?;
    let per_sample = |x: i64| (x as f64 / waits.0.max(1) as f64 * 10.0).round() / 10.0;
    let secs = (s1.at - s0.at).as_secs_f64();
    let hz = 100.0; // USER_HZ on Linux
    let cpu = |a: u64, b: u64| (b - a) as f64 / hz / secs * 100.0;
    let (mb, mi, mt) = (s1.machine.0 - s0.machine.0, s1.machine.1 - s0.machine.1, s1.machine.2 - s0.machine.2);
    let decided = s1.decided - s0.decided;
    let line = json!({
        "mode": mode, "agents": n_agents, "gates_per_agent": gates, "inflight_per_agent": inflight,
        "approvers": n_approvers, "approver_gates": approver_gates, "approver_threads": approver_threads,
        "decisions": decided, "seconds": (secs * 100.0).round() / 100.0,
        "decisions_per_s": (decided as f64 / secs).round(),
        "done_per_s": ((s1.done - s0.done) as f64 / secs).round(),
        "commits_per_s": ((s1.commits - s0.commits) as f64 / secs).round(),
        "wal_syncs_per_s": ((s1.wal_syncs - s0.wal_syncs) as f64 / secs).round(),
        "avg_backends_waiting_notify_lock": per_sample(waits.1),
        "avg_backends_in_wal_write_or_sync": per_sample(waits.2),
        "cpu_percent": {
            "agents": cpu(s0.agents, s1.agents).round(), "approvers": cpu(s0.approvers, s1.approvers).round(),
            "postgres": cpu(s0.postgres, s1.postgres).round(),
            "machine_busy_of_200": (mb as f64 / mt as f64 * 200.0).round(),
            "machine_iowait_of_200": (mi as f64 / mt as f64 * 200.0).round(),
        },
    });
    println!("{line}");
    for f in std::fs::read_dir(&dir).map_err(|e| e.to_string())?.flatten() {
        if f.path().extension().is_some_and(|e| e == "out") {
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            let mut o = std::io::stdout();
            let _ = write!(o, "{text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
