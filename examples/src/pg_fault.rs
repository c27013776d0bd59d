//! Fault injection for the PostgreSQL store: agents killed with SIGKILL at random, the server
//! restarted mid-run, and checks that no tool ran twice and no request was lost.
//!
//! ```text
//! signoff-pg-fault orchestrate --approvals N [--agents 3] [--inflight 8] [--kill-every-ms 300-1500]
//!                              [--restart-postgres] [--timeout-ms 5000] [--seed S] [--dir DIR] [--max-seconds 900]
//!                              [--min-kills 0]
//! ```
//!
//! Needs `SIGNOFF_TEST_POSTGRES_URL` (and `SIGNOFF_TEST_POSTGRES_CTL` for `--restart-postgres`; both
//! are set by `scripts/with-postgres.sh`). Every run uses a fresh schema `t_<random>`.
//!
//! The orchestrator runs itself again as 3 agent processes (`agent --owner agent-K ...`) and one
//! approver process (`approver ...`), each with a `PostgresStore` of its own on the same schema:
//!
//! - an agent keeps `--inflight` gated `execute` calls going, each with unique arguments; its tool
//!   appends `<request id> <owner> <call>` to `side-effects.log` (O_APPEND, fsynced before the tool
//!   returns: the only witness that survives SIGKILL). It logs `started <call>` / `resolved <call>
//!   <status> <request id>` to its own log. Restarted with the same owner, it calls
//!   `Gate::recover` first and appends the report to `recovery.jsonl`.
//! - the approver pages through the pending requests and approves them (denies every 20th, leaves
//!   every 50th unanswered: it times out).
//! - the orchestrator SIGKILLs a random agent every `--kill-every-ms` and restarts it with the same
//!   owner, restarts PostgreSQL once, stops when the database counts N approvals (and, with
//!   `--min-kills K`, not before K kills and the restart), lets the agents
//!   finish, runs a last recovery for every owner, waits past the deadlines, and checks:
//!   no request ran twice, none is left unfinished, every `interrupted` row was reported by a
//!   recovery, every `done` row ran exactly once, every run is `done` or `interrupted`, every call of
//!   an agent that was not killed resolved, and each agent's view of its calls agrees with the
//!   database. Exit status 1 when a check fails.

#[path = "pg_common.rs"]
mod pg_common;
use pg_common::{Args, Res, now_us, runtime, url};
use serde_json::{Value, json};
use signoff::{
    ApprovalMode, CallContext, ConfirmationResponse, ErrorKind, Gate, PendingStore, PostgresOptions, PostgresStore,
    RecordState, Tool, ToolCall,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOOL: &str = "write_record";
/// The approver denies every this many-th request it sees.
const DENY_EVERY: u64 = 20;
/// The approver leaves every this many-th request it sees unanswered (it times out: the agent's
/// timer or, while its agent is dead, a sweeper resolves it).
const IGNORE_EVERY: u64 = 50;
/// An agent exits with this when `Gate::recover` failed (the orchestrator starts it again).
const RECOVERY_FAILED: i32 = 3;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = Args(argv.iter().skip(1).cloned().collect());
    let r = match argv.first().map(String::as_str) {
        Some("orchestrate") => orchestrate(&args),
        Some("agent") => agent(&args),
        Some("approver") => approver(&args),
        _ => Err("usage: signoff-pg-fault orchestrate --approvals N [--agents 3] [--inflight 8] \
                  [--kill-every-ms 300-1500] [--restart-postgres] [--timeout-ms 5000] [--seed S] [--dir DIR] \
                  [--max-seconds 900] [--min-kills 0]"
            .into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("signoff-pg-fault: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An append-only log shared by tasks and processes: one `write` per line (O_APPEND keeps lines
/// whole), optionally fsynced.
#[derive(Clone)]
struct Log(Arc<File>);

impl Log {
    fn open(path: &Path) -> Res<Log> {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Ok(Log(Arc::new(f)))
    }
    fn line(&self, s: &str) {
        let mut buf = String::with_capacity(s.len() + 1);
        buf.push_str(s);
        buf.push('\n');
        if let Err(e) = (&*self.0).write_all(buf.as_bytes()) {
            eprintln!("log write failed: {e}");
        }
    }
    fn line_synced(&self, s: &str) -> std::io::Result<()> {
        let mut buf = String::with_capacity(s.len() + 1);
        buf.push_str(s);
        buf.push('\n');
        (&*self.0).write_all(buf.as_bytes())?;
        self.0.sync_data()
    }
}

fn connect(url: &str, schema: &str, owner: Option<String>) -> Res<Arc<PostgresStore>> {
    // The server may be restarting: try for a while.
    let start = Instant::now();
    loop {
        let opts = PostgresOptions {
            owner: owner.clone(),
            schema: Some(schema.to_owned()),
            sweep_interval: None,
            operation_timeout: None,
        };
        match PostgresStore::connect(url, opts) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("cannot connect: {e}")),
        }
    }
}

/// The gated tool: appends `<request id> <owner> <call>` to the side-effect file, fsynced.
fn side_effect_tool(side: Log, owner: String, timeout: Duration) -> Tool {
    Tool::builder(TOOL)
        .description("Appends one line to the side-effect file")
        .parameters(json!({"type": "object", "properties": {"call": {"type": "string"}}, "required": ["call"]}))
        .approval(ApprovalMode::Required)
        .timeout(timeout)
        .executor_with_context(move |args: Value, ctx: CallContext| {
            let (side, owner) = (side.clone(), owner.clone());
            async move {
                let id = match ctx.request_id {
                    Some(id) => id.to_string(),
                    None => format!("call:{}", ctx.call_id.unwrap_or_default()),
                };
                let line = format!("{id} {owner} {}", args["call"].as_str().unwrap_or("?"));
                tokio::task::spawn_blocking(move || side.line_synced(&line))
                    .await
                    .map_err(|e| format!("side effect task: {e}"))?
                    .map_err(|e| format!("side effect not written: {e}"))?;
                Ok(json!({"written": true}))
            }
        })
        .build()
}

fn ids<T>(items: &[T], id: impl Fn(&T) -> String) -> Vec<String> {
    items.iter().map(id).collect()
}

// ---------------------------------------------------------------------------------------------
// agent

fn agent(a: &Args) -> Res<()> {
    let url = url()?;
    let owner = a.req("--owner")?.to_owned();
    let schema = a.req("--schema")?.to_owned();
    let dir = PathBuf::from(a.req("--dir")?);
    let life = a.num("--life", 0)?;
    let inflight = a.num("--inflight", 8)? as usize;
    let timeout = Duration::from_millis(a.num("--timeout-ms", 5000)?);
    let recover = a.flag("--recover");
    // The store's calls block the calling thread for a round trip: threads, not cores, bound the
    // number of calls in progress.
    let rt = runtime(inflight.max(2) + 2)?;
    let log = Log::open(&dir.join(format!("agent-{owner}.{life}.log")))?;
    let side = Log::open(&dir.join("side-effects.log"))?;
    let reports = Log::open(&dir.join("recovery.jsonl"))?;
    rt.block_on(async move {
        let store = connect(&url, &schema, Some(owner.clone()))?;
        let gate = Gate::builder()
            .store(store.clone())
            .deny_when_unobserved(false)
            .tool(side_effect_tool(side, owner.clone(), timeout))
            .build()
            .map_err(|e| e.to_string())?;
        let mut restored: Vec<Arc<signoff::ConfirmationRequest>> = Vec::new();
        if recover {
            // What recovery is about to settle, in case it fails half-way (for the checks' message).
            let candidates: Vec<String> = store
                .unfinished()
                .map(|v| {
                    v.iter()
                        .filter(|r| !matches!(r.state, RecordState::Pending))
                        .map(|r| r.request.id.to_string())
                        .collect()
                })
                .unwrap_or_default();
            match gate.recover() {
                Ok(rep) => {
                    restored = rep.restored.clone();
                    let line = json!({
                        "owner": owner, "life": life, "ok": true,
                        "interrupted": ids(&rep.interrupted, |r| r.request.id.to_string()),
                        "restored": ids(&rep.restored, |r| r.id.to_string()),
                        "timed_out": ids(&rep.timed_out, |r| r.id.to_string()),
                        "not_restored": ids(&rep.not_restored, |r| r.request.id.to_string()),
                    });
                    reports.line_synced(&line.to_string()).map_err(|e| e.to_string())?;
                }
                Err(e) => {
                    let line = json!({"owner": owner, "life": life, "ok": false, "error": e.to_string(),
                                      "candidates": candidates});
                    reports.line_synced(&line.to_string()).map_err(|e| e.to_string())?;
                    eprintln!("agent {owner}.{life}: recovery failed: {e}");
                    std::process::exit(RECOVERY_FAILED);
                }
            }
        }
        let stop = dir.join("stop");
        let mut set = tokio::task::JoinSet::new();
        let mut seq = 0u64;
        loop {
            while set.len() < inflight && !stop.exists() {
                seq += 1;
                let call = format!("{owner}.{life}.{seq}");
                log.line(&format!("started {call}"));
                let (g, log) = (gate.clone(), log.clone());
                set.spawn(async move {
                    let r = g.execute(ToolCall::new(TOOL, json!({"call": call})).call_id(call.clone())).await;
                    let status = serde_json::to_value(r.status).ok().and_then(|v| v.as_str().map(str::to_owned));
                    let id = r.request_id.map(|u| u.to_string()).unwrap_or_else(|| "-".into());
                    log.line(&format!("resolved {call} {} {id}", status.as_deref().unwrap_or("?")));
                    if r.status == signoff::ToolStatus::Rejected {
                        // The store is away (a server restart): do not spin.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                });
            }
            if set.is_empty() {
                break;
            }
            let _ = set.join_next().await;
        }
        // Requests restored by the recovery run in the gate's tasks: let them end too.
        let until = Instant::now() + timeout + Duration::from_secs(10);
        for req in &restored {
            while Instant::now() < until {
                match gate.record(&req.id) {
                    Some(r) if r.state.is_final() => break,
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        gate.close();
        Ok::<(), String>(())
    })
}

// ---------------------------------------------------------------------------------------------
// approver

fn approver(a: &Args) -> Res<()> {
    let url = url()?;
    let schema = a.req("--schema")?.to_owned();
    let dir = PathBuf::from(a.req("--dir")?);
    let log = Log::open(&dir.join("approver.log"))?;
    let rt = runtime(2)?;
    rt.block_on(async move {
        let store = connect(&url, &schema, None)?;
        let side = Log::open(&dir.join("side-effects.log"))?;
        // The approver registers the tool too (edits would be checked against its schema); it
        // never runs it: it waits for nothing.
        let gate = Gate::builder()
            .store(store)
            .deny_when_unobserved(false)
            .tool(side_effect_tool(side, "approver".into(), Duration::from_secs(5)))
            .build()
            .map_err(|e| e.to_string())?;
        let stop = dir.join("stop-approver");
        let mut answered = 0u64;
        let mut ignored: HashSet<String> = HashSet::new();
        let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
        while !stop.exists() {
            let page = gate.pending_page(None, 200);
            let mut fresh = 0;
            for req in page.requests {
                if ignored.contains(&req.id.to_string()) {
                    continue;
                }
                fresh += 1;
                answered += 1;
                if answered % IGNORE_EVERY == IGNORE_EVERY / 2 {
                    ignored.insert(req.id.to_string());
                    log.line(&format!("ignored {}", req.id));
                    continue;
                }
                let deny = answered.is_multiple_of(DENY_EVERY);
                let mut tries = 0;
                loop {
                    let resp = if deny {
                        ConfirmationResponse::deny(&req, Some("every 20th request is denied".into()))
                    } else {
                        ConfirmationResponse::approve(&req)
                    };
                    let what = match gate.respond(resp.with_responder("approver")) {
                        Ok(_) if deny => "denied",
                        Ok(_) => "approved",
                        Err(e) => match e.kind() {
                            ErrorKind::AlreadyResolved => "already_resolved",
                            ErrorKind::Expired => "expired",
                            // A lost connection (a server restart): `record` reads nothing, which
                            // `respond` reports as unknown_request; try again.
                            ErrorKind::Store | ErrorKind::UnknownRequest if tries < 100 => {
                                tries += 1;
                                let kind =
                                    if e.kind() == ErrorKind::Store { "retried_store" } else { "retried_unknown" };
                                *counts.entry(kind).or_default() += 1;
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                continue;
                            }
                            _ => {
                                log.line(&format!("error {} {}: {e}", req.id, e.kind().as_str()));
                                "error"
                            }
                        },
                    };
                    *counts.entry(what).or_default() += 1;
                    log.line(&format!("{what} {}", req.id));
                    break;
                }
            }
            if fresh == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        println!("approver: {}", serde_json::to_string(&counts).unwrap_or_default());
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// orchestrator

/// A small deterministic generator (xorshift64*), seeded per run and printed, so a run's kill
/// schedule can be repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    u64::from_le_bytes(b) ^ now_us() | 1
}

/// The orchestrator's own SQL connection (the checks read the table directly, not through the
/// store under test), reconnected after a server restart.
struct Sql {
    url: String,
    schema: String,
    client: Option<tokio_postgres::Client>,
}

impl Sql {
    async fn client(&mut self) -> Res<&tokio_postgres::Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            let (c, conn) =
                tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await.map_err(|e| format!("sql: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            c.batch_execute(&format!("SET search_path TO {}", self.schema)).await.map_err(|e| format!("sql: {e}"))?;
            self.client = Some(c);
        }
        Ok(self.client.as_ref().expect("connected"))
    }

    async fn query(&mut self, sql: &str) -> Res<Vec<tokio_postgres::Row>> {
        let r = self.client().await?.query(sql, &[]).await.map_err(|e| format!("sql: {e}"));
        if r.is_err() {
            self.client = None;
        }
        r
    }

    /// Rows per state.
    async fn states(&mut self) -> Res<BTreeMap<String, i64>> {
        let rows = self.query("SELECT state, count(*) FROM signoff_requests GROUP BY state").await?;
        Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1))).collect())
    }
}

/// Rows a person approved, by the database: approved, executing, done, interrupted, released.
fn approvals(states: &BTreeMap<String, i64>) -> i64 {
    ["approved", "executing", "done", "interrupted", "released"]
        .iter()
        .map(|s| states.get(*s).copied().unwrap_or(0))
        .sum()
}

struct AgentProc {
    owner: String,
    life: u64,
    child: Child,
}

/// How each agent life ended.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Killed,
    Clean,
    RecoveryFailed,
    Other(i32),
}

struct Orchestra {
    exe: PathBuf,
    url: String,
    schema: String,
    dir: PathBuf,
    inflight: u64,
    timeout_ms: u64,
    lives: HashMap<String, u64>,
    ends: Vec<(String, u64, End)>,
}

impl Orchestra {
    fn spawn_agent(&mut self, owner: &str) -> Res<AgentProc> {
        let life = {
            let l = self.lives.entry(owner.to_owned()).or_insert(0);
            *l += 1;
            *l - 1
        };
        let out = File::create(self.dir.join(format!("agent-{owner}.{life}.out"))).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("agent")
            .args(["--owner", owner, "--schema", &self.schema])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--life", &life.to_string(), "--inflight", &self.inflight.to_string()])
            .args(["--timeout-ms", &self.timeout_ms.to_string()])
            .env("SIGNOFF_TEST_POSTGRES_URL", &self.url)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out);
        if life > 0 {
            cmd.arg("--recover");
        }
        let child = cmd.spawn().map_err(|e| format!("cannot start an agent: {e}"))?;
        Ok(AgentProc { owner: owner.to_owned(), life, child })
    }
}

fn restart_postgres(ctl: &str) -> Res<Duration> {
    let t = Instant::now();
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("{ctl} restart -w -m fast"))
        .stdout(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("`{ctl} restart -w -m fast` failed: {st}"));
    }
    Ok(t.elapsed())
}

fn orchestrate(a: &Args) -> Res<()> {
    let url = url()?;
    let target = a.num("--approvals", 1000)? as i64;
    let n_agents = a.num("--agents", 3)?;
    let inflight = a.num("--inflight", 8)?;
    let timeout_ms = a.num("--timeout-ms", 5000)?;
    let max_s = a.num("--max-seconds", 900)?;
    let min_kills = a.num("--min-kills", 0)?;
    let (kill_lo, kill_hi) = match a.get("--kill-every-ms").unwrap_or("300-1500").split_once('-') {
        Some((lo, hi)) => {
            (lo.parse::<u64>().map_err(|e| e.to_string())?, hi.parse::<u64>().map_err(|e| e.to_string())?)
        }
        None => return Err("--kill-every-ms LO-HI (milliseconds), e.g. 300-1500; 0-0 kills nothing".into()),
    };
    let ctl = if a.flag("--restart-postgres") {
        match std::env::var("SIGNOFF_TEST_POSTGRES_CTL") {
            Ok(c) if !c.is_empty() => Some(c),
            _ => {
                return Err(
                    "--restart-postgres needs SIGNOFF_TEST_POSTGRES_CTL (set by scripts/with-postgres.sh)".into()
                );
            }
        }
    } else {
        None
    };
    let seed = match a.get("--seed") {
        Some(s) => s.parse().map_err(|_| "--seed: not a number")?,
        None => random_seed(),
    };
    let mut rng = Rng(seed.max(1));
    let schema = format!("t_{:016x}", rng.next());
    let dir = match a.get("--dir") {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("signoff-pg-fault-{schema}")),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "pg-fault: {target} approvals, {n_agents} agents x {inflight} in flight, kill every {kill_lo}-{kill_hi} ms, \
         restart postgres: {}, tool timeout {timeout_ms} ms, seed {seed}, schema {schema}, files in {}",
        ctl.is_some(),
        dir.display()
    );
    // The tables exist before anyone races to create them.
    let setup = connect(&url, &schema, Some("pg-fault-setup".into()))?;
    setup.close();
    drop(setup);

    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut o = Orchestra {
        exe: exe.clone(),
        url: url.clone(),
        schema: schema.clone(),
        dir: dir.clone(),
        inflight,
        timeout_ms,
        lives: HashMap::new(),
        ends: Vec::new(),
    };
    let owners: Vec<String> = (0..n_agents).map(|k| format!("agent-{k}")).collect();
    let rt = runtime(2)?;
    let mut sql = Sql { url: url.clone(), schema: schema.clone(), client: None };
    let started = Instant::now();

    let approver_out = File::create(dir.join("approver.out")).map_err(|e| e.to_string())?;
    let mut approver = Command::new(&exe)
        .args(["approver", "--schema", &schema])
        .arg("--dir")
        .arg(&dir)
        .env("SIGNOFF_TEST_POSTGRES_URL", &url)
        .stdin(Stdio::null())
        .stdout(approver_out.try_clone().map_err(|e| e.to_string())?)
        .stderr(approver_out)
        .spawn()
        .map_err(|e| format!("cannot start the approver: {e}"))?;
    let mut agents: Vec<AgentProc> = Vec::new();
    for owner in &owners {
        agents.push(o.spawn_agent(owner)?);
    }

    let mut problems: Vec<String> = Vec::new();
    let mut kills = 0u64;
    let mut restarts = 0u64;
    let mut restart_thread: Option<std::thread::JoinHandle<Res<Duration>>> = None;
    let mut restart_took = None;
    let mut next_kill = (kill_hi > 0).then(|| Instant::now() + Duration::from_millis(rng.between(kill_lo, kill_hi)));
    let mut last_report = Instant::now();
    let mut approved_now = 0i64;
    // Restart the server once, when this many approvals are in (after some kills).
    let restart_at = (target * 2 / 5).max(1);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(states) = rt.block_on(sql.states()) {
            approved_now = approvals(&states);
        }
        // Enough approvals, and (for short runs on fast machines) enough chaos.
        if approved_now >= target && kills >= min_kills && (ctl.is_none() || restart_took.is_some()) {
            break;
        }
        if started.elapsed() > Duration::from_secs(max_s) {
            problems.push(format!("only {approved_now} of {target} approvals after {max_s} s: stopped"));
            break;
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            println!("  {:>5.1} s: {approved_now} approvals, {kills} kills", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        if let Some(c) = &ctl
            && restart_thread.is_none()
            && restarts == 0
            && approved_now >= restart_at
        {
            let c = c.clone();
            println!("  {:>5.1} s: restarting PostgreSQL", started.elapsed().as_secs_f64());
            restart_thread = Some(std::thread::spawn(move || restart_postgres(&c)));
            restarts += 1;
        }
        if restart_thread.as_ref().is_some_and(|t| t.is_finished()) {
            match restart_thread.take().expect("checked").join() {
                Ok(Ok(took)) => restart_took = Some(took),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err("the restart thread panicked".into()),
            }
        }
        // Agents that ended by themselves.
        for ag in agents.iter_mut() {
            if let Ok(Some(st)) = ag.child.try_wait() {
                let end = match st.code() {
                    Some(0) => End::Clean,
                    Some(RECOVERY_FAILED) => End::RecoveryFailed,
                    Some(c) => End::Other(c),
                    None => End::Other(-1),
                };
                if end != End::RecoveryFailed {
                    problems.push(format!("agent {}.{} exited by itself ({st}) during the run", ag.owner, ag.life));
                }
                o.ends.push((ag.owner.clone(), ag.life, end));
                let owner = ag.owner.clone();
                std::thread::sleep(Duration::from_millis(200));
                *ag = o.spawn_agent(&owner)?;
            }
        }
        if let Some(t) = next_kill
            && Instant::now() >= t
        {
            let k = rng.between(0, agents.len() as u64 - 1) as usize;
            let ag = &mut agents[k];
            // SIGKILL, and reaped before the owner name is used again: never two live processes
            // with one owner.
            let _ = ag.child.kill();
            let _ = ag.child.wait();
            kills += 1;
            o.ends.push((ag.owner.clone(), ag.life, End::Killed));
            let owner = ag.owner.clone();
            *ag = o.spawn_agent(&owner)?;
            next_kill = Some(Instant::now() + Duration::from_millis(rng.between(kill_lo, kill_hi)));
        }
    }
    if let Some(t) = restart_thread.take() {
        match t.join() {
            Ok(Ok(took)) => restart_took = Some(took),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("the restart thread panicked".into()),
        }
    }
    if ctl.is_some() && restarts == 0 {
        problems.push("PostgreSQL was never restarted (the run ended first)".into());
    }
    let run_time = started.elapsed();
    println!("  {:>5.1} s: {approved_now} approvals: stopping the agents", run_time.as_secs_f64());

    // Let the agents finish what they started (approved, or timed out), then exit by themselves.
    File::create(dir.join("stop")).map_err(|e| e.to_string())?;
    let drain_until = Instant::now() + Duration::from_millis(timeout_ms) + Duration::from_secs(30);
    for ag in agents.iter_mut() {
        loop {
            match ag.child.try_wait() {
                Ok(Some(st)) => {
                    let end = match st.code() {
                        Some(0) => End::Clean,
                        Some(RECOVERY_FAILED) => End::RecoveryFailed,
                        Some(c) => End::Other(c),
                        None => End::Other(-1),
                    };
                    if end != End::Clean {
                        problems.push(format!("agent {}.{} did not stop cleanly: {st}", ag.owner, ag.life));
                    }
                    o.ends.push((ag.owner.clone(), ag.life, end));
                    break;
                }
                Ok(None) if Instant::now() < drain_until => std::thread::sleep(Duration::from_millis(50)),
                _ => {
                    problems.push(format!(
                        "HANG: agent {}.{} had not finished its calls {} s after the stop (log: {})",
                        ag.owner,
                        ag.life,
                        (drain_until - started).as_secs(),
                        dir.join(format!("agent-{}.{}.log", ag.owner, ag.life)).display()
                    ));
                    let _ = ag.child.kill();
                    let _ = ag.child.wait();
                    o.ends.push((ag.owner.clone(), ag.life, End::Killed));
                    break;
                }
            }
        }
    }
    File::create(dir.join("stop-approver")).map_err(|e| e.to_string())?;
    match approver.wait() {
        Ok(st) if st.success() => {}
        Ok(st) => problems.push(format!("the approver failed: {st} (see {})", dir.join("approver.out").display())),
        Err(e) => problems.push(format!("the approver: {e}")),
    }

    // The last recovery, for every owner: what the agents left approved or executing is reported
    // interrupted; what is still pending waits again (nobody answers now) until its deadline.
    let side = Log::open(&dir.join("side-effects.log"))?;
    let reports = Log::open(&dir.join("recovery.jsonl"))?;
    let final_gates = rt.block_on(async {
        let mut gates = Vec::new();
        for owner in &owners {
            let store = connect(&url, &schema, Some(owner.clone()))?;
            let gate = Gate::builder()
                .store(store)
                .deny_when_unobserved(false)
                .tool(side_effect_tool(side.clone(), format!("{owner}-final"), Duration::from_millis(timeout_ms)))
                .build()
                .map_err(|e| e.to_string())?;
            let rep = gate.recover().map_err(|e| format!("the final recovery of {owner} failed: {e}"))?;
            let line = json!({
                "owner": owner, "life": "final", "ok": true,
                "interrupted": ids(&rep.interrupted, |r| r.request.id.to_string()),
                "restored": ids(&rep.restored, |r| r.id.to_string()),
                "timed_out": ids(&rep.timed_out, |r| r.id.to_string()),
                "not_restored": ids(&rep.not_restored, |r| r.request.id.to_string()),
            });
            reports.line_synced(&line.to_string()).map_err(|e| e.to_string())?;
            gates.push(gate);
        }
        Ok::<_, String>(gates)
    })?;
    // Past every deadline (the sweepers and the restored requests' timers resolve them).
    let settle_until = Instant::now() + Duration::from_millis(timeout_ms) + Duration::from_secs(5);
    loop {
        let states = rt.block_on(sql.states())?;
        let open: i64 = ["pending", "approved", "executing"].iter().map(|s| states.get(*s).copied().unwrap_or(0)).sum();
        if open == 0 || Instant::now() > settle_until {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for g in &final_gates {
        g.close();
    }
    drop(final_gates);

    let total = started.elapsed();
    let report = rt.block_on(check(&mut sql, &dir, &o.ends))?;
    problems.extend(report.problems.iter().cloned());

    let s = &report.states;
    let get = |k: &str| s.get(k).copied().unwrap_or(0);
    println!("pg-fault summary:");
    println!("  approvals (database): {}", approvals(s));
    println!("  executions (side-effect lines): {}", report.executions);
    println!(
        "  done: {}  denied: {}  timed out: {}  cancelled: {}  interrupted: {}  released: {}",
        get("done"),
        get("denied"),
        get("timed-out"),
        get("cancelled"),
        get("interrupted"),
        get("released")
    );
    println!("  requests: {}  agent calls started: {}  resolved: {}", report.rows, report.started, report.resolved);
    println!("  approver: {}", report.approver);
    println!(
        "  kills (SIGKILL): {kills}  agent lives: {}  recoveries: {} ({} failed)  restored: {}  \
         PostgreSQL restarts: {restarts}{}",
        o.ends.len(),
        report.recoveries,
        report.failed_recoveries,
        report.restored,
        restart_took.map(|d| format!(" (took {:.1} s)", d.as_secs_f64())).unwrap_or_default()
    );
    println!(
        "  duration: {:.1} s to {target} approvals ({:.0} approvals/s), {:.1} s in all",
        run_time.as_secs_f64(),
        approved_now as f64 / run_time.as_secs_f64(),
        total.as_secs_f64()
    );
    println!("  double executions: {}  lost (unfinished) requests: {}", report.double, report.unfinished);
    if problems.is_empty() {
        println!("pg-fault: ok: every check passed (files in {})", dir.display());
        Ok(())
    } else {
        for p in &problems {
            println!("FAILED: {p}");
        }
        Err(format!("{} check(s) failed; files in {}", problems.len(), dir.display()))
    }
}

#[derive(Default)]
struct Report {
    states: BTreeMap<String, i64>,
    rows: usize,
    executions: usize,
    double: usize,
    unfinished: usize,
    started: usize,
    resolved: usize,
    recoveries: usize,
    failed_recoveries: usize,
    restored: usize,
    approver: String,
    problems: Vec<String>,
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(str::to_owned).collect()).unwrap_or_default()
}

/// At most this many examples per failed check in the message.
fn some(ids: &[String]) -> String {
    let mut v: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
    if ids.len() > 5 {
        v.push("...");
    }
    v.join(", ")
}

async fn check(sql: &mut Sql, dir: &Path, ends: &[(String, u64, End)]) -> Res<Report> {
    let mut r = Report::default();
    let rows = sql.query("SELECT id::text, state, owner FROM signoff_requests").await?;
    let state: HashMap<String, String> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    r.rows = state.len();
    r.states = sql.states().await?;

    // 1. No request ran twice.
    let side = read_lines(&dir.join("side-effects.log"));
    r.executions = side.len();
    let mut runs: HashMap<String, Vec<String>> = HashMap::new();
    for l in &side {
        let mut w = l.split(' ');
        let id = w.next().unwrap_or_default().to_owned();
        runs.entry(id).or_default().push(l.clone());
    }
    let twice: Vec<String> = runs
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(id, v)| format!("{id} ran {} times: {:?}", v.len(), v))
        .collect();
    r.double = twice.len();
    if !twice.is_empty() {
        r.problems.push(format!("DOUBLE EXECUTION of {} request(s): {}", twice.len(), some(&twice)));
    }

    // 2. Nothing left unfinished.
    let open: Vec<String> = state
        .iter()
        .filter(|(_, s)| matches!(s.as_str(), "pending" | "approved" | "executing"))
        .map(|(id, s)| format!("{id} ({s})"))
        .collect();
    r.unfinished = open.len();
    if !open.is_empty() {
        r.problems.push(format!(
            "LOST: {} request(s) still unfinished after the final recoveries and the deadlines: {}",
            open.len(),
            some(&open)
        ));
    }

    // 3. Every interrupted row was reported by a recovery.
    let mut reported: HashSet<String> = HashSet::new();
    let mut candidates: HashSet<String> = HashSet::new();
    for l in read_lines(&dir.join("recovery.jsonl")) {
        let v: Value = serde_json::from_str(&l).map_err(|e| format!("recovery.jsonl: {e}"))?;
        if v["ok"] == json!(true) {
            r.recoveries += 1;
            r.restored += v["restored"].as_array().map_or(0, Vec::len);
            for id in v["interrupted"].as_array().into_iter().flatten() {
                reported.insert(id.as_str().unwrap_or_default().to_owned());
            }
        } else {
            r.failed_recoveries += 1;
            for id in v["candidates"].as_array().into_iter().flatten() {
                candidates.insert(id.as_str().unwrap_or_default().to_owned());
            }
        }
    }
    let unreported: Vec<String> = state
        .iter()
        .filter(|(id, s)| *s == "interrupted" && !reported.contains(*id))
        .map(|(id, _)| id.clone())
        .collect();
    if !unreported.is_empty() {
        let by_failed = unreported.iter().filter(|id| candidates.contains(*id)).count();
        r.problems.push(format!(
            "{} interrupted request(s) reported by no recovery ({by_failed} of them were in the way of a recovery that \
             failed half-way, which reports nothing): {}",
            unreported.len(),
            some(&unreported)
        ));
    }

    // 4. Every done row ran exactly once; 5. every run is done or interrupted.
    let done_not_run: Vec<String> = state
        .iter()
        .filter(|(id, s)| *s == "done" && runs.get(*id).is_none_or(|v| v.len() != 1))
        .map(|(id, _)| id.clone())
        .collect();
    if !done_not_run.is_empty() {
        r.problems.push(format!(
            "{} done request(s) without exactly one run: {}",
            done_not_run.len(),
            some(&done_not_run)
        ));
    }
    let bad_runs: Vec<String> = runs
        .keys()
        .filter(|id| !matches!(state.get(*id).map(String::as_str), Some("done" | "interrupted")))
        .map(|id| format!("{id} ({})", state.get(id).map(String::as_str).unwrap_or("no row")))
        .collect();
    if !bad_runs.is_empty() {
        r.problems.push(format!(
            "{} run(s) whose request is neither done nor interrupted: {}",
            bad_runs.len(),
            some(&bad_runs)
        ));
    }

    // 6. Every call of an agent life that was not killed resolved; 7. the agents agree with the
    // database.
    let mut unresolved = Vec::new();
    let mut disagree = Vec::new();
    for (owner, life, end) in ends {
        let lines = read_lines(&dir.join(format!("agent-{owner}.{life}.log")));
        let mut started: HashSet<&str> = HashSet::new();
        let mut resolved: HashSet<&str> = HashSet::new();
        for l in &lines {
            let w: Vec<&str> = l.split(' ').collect();
            match w.as_slice() {
                ["started", call] => {
                    started.insert(call);
                }
                ["resolved", call, status, id] => {
                    resolved.insert(call);
                    let db = state.get(*id).map(String::as_str);
                    let ok = match *status {
                        "executed" | "failed" => matches!(db, Some("done" | "interrupted")),
                        "denied" => db == Some("denied"),
                        "timed-out" => db == Some("timed-out"),
                        "cancelled" => matches!(db, Some("cancelled" | "interrupted")),
                        "rejected" => {
                            *id == "-" || matches!(db, Some("cancelled" | "timed-out" | "denied" | "interrupted"))
                        }
                        _ => false,
                    };
                    if !ok {
                        disagree.push(format!(
                            "{call}: agent says {status}, database says {} ({id})",
                            db.unwrap_or("no row")
                        ));
                    }
                }
                _ => {}
            }
        }
        r.started += started.len();
        r.resolved += resolved.len();
        if matches!(end, End::Clean) {
            unresolved.extend(started.difference(&resolved).map(|c| (*c).to_owned()));
        }
    }
    if !unresolved.is_empty() {
        r.problems.push(format!(
            "{} call(s) of agents that were not killed never resolved: {}",
            unresolved.len(),
            some(&unresolved)
        ));
    }
    if !disagree.is_empty() {
        r.problems.push(format!(
            "{} call(s) where an agent and the database disagree: {}",
            disagree.len(),
            some(&disagree)
        ));
    }
    let approver_lines = read_lines(&dir.join("approver.log"));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &approver_lines {
        *counts.entry(l.split(' ').next().unwrap_or("?")).or_default() += 1;
    }
    r.approver = counts.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    if counts.contains_key("error") {
        r.problems.push(format!("the approver met unexpected errors (see {})", dir.join("approver.log").display()));
    }
    Ok(r)
}
