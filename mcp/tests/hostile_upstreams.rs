//! Upstreams that do not list their tools as they should, with rmcp's own clients and in-process
//! rmcp upstreams (over in-memory pipes): at start, a listing that never answers, never ends, is
//! too large or cannot be read is an error naming the upstream within its bound, not a proxy that
//! never starts; one upstream slow to list after a change delays neither calls to another nor a
//! `tools/list` by more than its own listing; and while an upstream's announced change cannot be
//! listed, even a tool whose last definition needed no approval is asked about.

mod common;
use common::{Shifty, keyed, text};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use signoff::Gate;
use signoff_mcp::{McpGate, Upstream, UpstreamClient};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An upstream listing whatever tools it is given, as told: never answering, naming a next page
/// on every page, or after a delay. Counts the calls it runs.
#[derive(Clone, Default)]
struct Lister {
    tools: Arc<Mutex<Vec<Tool>>>,
    runs: Arc<AtomicUsize>,
    /// Every page names a next one (each page's tools renamed with the page's number).
    endless: bool,
    /// `tools/list` never answers.
    stalled: bool,
    /// How long `tools/list` takes, in milliseconds.
    delay_ms: Arc<AtomicUsize>,
}

impl ServerHandler for Lister {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn list_tools(
        &self,
        req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if self.stalled {
            std::future::pending::<()>().await;
        }
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay as u64)).await;
        }
        let mut r = ListToolsResult::with_all_items(self.tools.lock().unwrap().clone());
        if self.endless {
            let n: u64 = req.and_then(|p| p.cursor).and_then(|c| c.parse().ok()).unwrap_or(0);
            for t in &mut r.tools {
                t.name = format!("{}{n}", t.name).into();
            }
            r.next_cursor = Some((n + 1).to_string());
        }
        Ok(r)
    }

    async fn call_tool(
        &self,
        _req: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text("ran")]).into())
    }
}

fn tool(name: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else { panic!("a schema is an object") };
    Tool::new(name.to_owned(), "desc", Arc::new(schema))
}

/// A tool whose definition says it only reads (`readOnlyHint`), so it runs without asking.
fn read_only(name: &str) -> Tool {
    let mut t = tool(name, json!({"type": "object"}));
    let mut hints = ToolAnnotations::default();
    hints.read_only_hint = Some(true);
    t.annotations = Some(hints);
    t
}

/// A 2025-11-25 client with form elicitation that records every message it is shown and answers
/// with `decision` (which the test may change between calls).
#[derive(Clone)]
struct Person {
    shown: Arc<Mutex<Vec<String>>>,
    decision: Arc<Mutex<&'static str>>,
}

impl Person {
    fn new(decision: &'static str) -> Self {
        Person { shown: Default::default(), decision: Arc::new(Mutex::new(decision)) }
    }

    fn asked(&self) -> usize {
        self.shown.lock().unwrap().len()
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("rmcp-person", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        req: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &req {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            ElicitRequestParams::UrlElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        self.shown.lock().unwrap().push(message);
        let decision = *self.decision.lock().unwrap();
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": decision})))
    }
}

/// `up` served in process and an rmcp client of it, as an upstream named `name` whose listings
/// may take `list_timeout`.
async fn upstream<S: ServerHandler + Clone>(
    up: &S,
    name: &str,
    list_timeout: Duration,
) -> (RunningService<RoleServer, S>, Upstream) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (server, client) = tokio::join!(up.clone().serve(a), UpstreamClient::default().serve(b));
    // Its read-only tools run without asking: these tests are about listings, so its hints are
    // taken as facts.
    (server.unwrap(), Upstream::new(name, client.unwrap()).list_timeout(list_timeout).trust_annotations(true))
}

/// Starts a proxy over `up` (upstream `up`) whose listings may take `list_timeout`, failing the
/// test if starting takes more than `bound`. The proxy, or why it did not start.
async fn start(up: &Lister, gate: &Gate, list_timeout: Duration, bound: Duration) -> Result<McpGate, String> {
    let (_server, u) = upstream(up, "up", list_timeout).await;
    let begun = Instant::now();
    let started = tokio::time::timeout(bound, McpGate::new(gate.clone(), vec![u], &BTreeMap::new()))
        .await
        .unwrap_or_else(|_| panic!("the proxy was still starting after {bound:?}"));
    assert!(begun.elapsed() < bound);
    started
}

/// A client `person` of a proxy over `ups`.
async fn serve(gate: &Gate, ups: Vec<Upstream>, person: Person) -> (McpGate, RunningService<RoleClient, Person>) {
    let mcp = McpGate::new(gate.clone(), ups, &BTreeMap::new()).await.expect("the proxy starts");
    let (c, d) = tokio::io::duplex(1 << 20);
    let connection = mcp.connection();
    tokio::spawn(async move {
        let running = connection.serve(c).await.expect("the proxy serves");
        let _ = running.waiting().await;
    });
    let client = person.serve_with_lifecycle(d, ClientLifecycleMode::Initialize).await.expect("the client connects");
    (mcp, client)
}

fn call(name: &str) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned())
        .with_arguments(json!({"path": "notes.txt"}).as_object().unwrap().clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_listing_that_never_answers_at_start_is_an_error_naming_the_upstream() {
    let up = Lister { stalled: true, ..Default::default() };
    let gate = keyed().build().unwrap();
    let e = start(&up, &gate, Duration::from_millis(300), Duration::from_secs(10)).await.err().expect("an error");
    assert_eq!(e, "upstream \"up\": tools/list: no answer within 300 ms");
    gate.close();
}

/// Pages that never end: an error once the listing passes the most pages a listing may have (well
/// before its time is up), not one list growing for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_tool_listing_at_start_is_an_error_naming_the_upstream() {
    let up = Lister { endless: true, ..Default::default() };
    up.tools.lock().unwrap().push(tool("t", json!({"type": "object"})));
    let gate = keyed().build().unwrap();
    let e = start(&up, &gate, Duration::from_secs(60), Duration::from_secs(30)).await.err().expect("an error");
    assert!(e.starts_with("upstream \"up\": tools/list: its listing goes on past 1000 pages"), "{e}");
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_more_tools_than_one_upstream_may_offer_is_an_error() {
    let gate = keyed().build().unwrap();
    let up = Lister::default();
    up.tools.lock().unwrap().extend((0..10_000).map(|i| tool(&format!("t{i}"), json!({"type": "object"}))));
    let mcp =
        start(&up, &gate, Duration::from_secs(60), Duration::from_secs(60)).await.expect("10000 tools are offered");
    assert!(mcp.gating("up__t9999").is_some());
    up.tools.lock().unwrap().push(tool("one_more", json!({"type": "object"})));
    let e = start(&up, &gate, Duration::from_secs(60), Duration::from_secs(60)).await.err().expect("an error");
    assert_eq!(e, "upstream \"up\": tools/list: it lists more than 10000 tools, the most one upstream may offer");
    gate.close();
}

/// Answers rmcp cannot read, and drops: a schema nested deeper than serde_json reads, a line
/// longer than the transport takes (16 MiB). Either way the listing ends within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_listing_that_cannot_be_read_at_start_is_an_error_naming_the_upstream() {
    let gate = keyed().build().unwrap();
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    let up = Lister::default();
    up.tools.lock().unwrap().push(tool("deep", deep));
    let e = start(&up, &gate, Duration::from_secs(1), Duration::from_secs(10)).await.err().expect("an error");
    assert!(e.starts_with("upstream \"up\": tools/list: "), "{e}");
    let up = Lister::default();
    let mut huge = tool("huge", json!({"type": "object"}));
    huge.description = Some("x".repeat(17 << 20).into());
    up.tools.lock().unwrap().push(huge);
    let e = start(&up, &gate, Duration::from_secs(1), Duration::from_secs(10)).await.err().expect("an error");
    assert!(e.starts_with("upstream \"up\": tools/list: "), "{e}");
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_timeout_of_zero_or_over_an_hour_is_refused() {
    let gate = keyed().build().unwrap();
    for (limit, ok) in [(0, false), (1, true), (3_600_000, true), (3_600_001, false)] {
        let up = Lister::default();
        let (_server, u) = upstream(&up, "up", Duration::from_millis(limit)).await;
        match McpGate::new(gate.clone(), vec![u], &BTreeMap::new()).await {
            Ok(_) => assert!(ok, "{limit} ms accepted"),
            Err(e) if ok => {
                // Accepted, then (1 ms on a busy machine) the listing itself may take longer.
                assert!(e.contains("no answer within"), "{limit} ms: {e}")
            }
            Err(e) => assert!(e.starts_with("upstream \"up\": list timeout"), "{limit} ms: {e}"),
        }
    }
    gate.close();
}

/// Upstream `b` announces changes and takes 3 s to list them: a call to upstream `a`'s tool does
/// not wait for that (before, every call listed every changed upstream first, one by one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_listing_of_one_upstream_does_not_delay_calls_to_another() {
    let a = Lister::default();
    a.tools.lock().unwrap().push(read_only("read"));
    let b = Shifty::default();
    let (_sa, ua) = upstream(&a, "a", Duration::from_secs(10)).await;
    let (sb, ub) = upstream(&b, "b", Duration::from_secs(10)).await;
    let gate = keyed().build().unwrap();
    let (_mcp, client) = serve(&gate, vec![ua, ub], Person::new("deny")).await;
    b.list_delay_ms.store(3_000, Ordering::SeqCst);
    for _ in 0..2 {
        sb.peer().notify_tool_list_changed().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let begun = Instant::now();
        let r = client.call_tool(call("a__read")).await.unwrap();
        assert_eq!(text(&r), "ran");
        assert!(begun.elapsed() < Duration::from_millis(1500), "a call to a waited {:?} for b", begun.elapsed());
    }
    assert_eq!(a.runs.load(Ordering::SeqCst), 2);
    // b's own tool still waits for b's listing, and sees its change.
    b.version.store(1, Ordering::SeqCst);
    sb.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "b__write" && t.description.as_deref() == Some("Writes (version 1)")));
    gate.close();
}

/// Two upstreams announce changes, each taking 2 s to list: `tools/list` lists them at the same
/// time (before, one after the other: 4 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_lists_changed_upstreams_at_the_same_time() {
    let (a, b) = (Shifty::default(), Shifty::default());
    let (sa, ua) = upstream(&a, "a", Duration::from_secs(10)).await;
    let (sb, ub) = upstream(&b, "b", Duration::from_secs(10)).await;
    let gate = keyed().build().unwrap();
    let (_mcp, client) = serve(&gate, vec![ua, ub], Person::new("deny")).await;
    for (up, server) in [(&a, &sa), (&b, &sb)] {
        up.list_delay_ms.store(2_000, Ordering::SeqCst);
        up.version.store(1, Ordering::SeqCst);
        server.peer().notify_tool_list_changed().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let begun = Instant::now();
    let tools = client.list_all_tools().await.unwrap();
    let took = begun.elapsed();
    assert!(took < Duration::from_millis(3900), "tools/list took {took:?} (one after the other: 4 s)");
    let described: Vec<_> =
        tools.iter().map(|t| (t.name.to_string(), t.description.clone().unwrap_or_default())).collect();
    assert_eq!(
        described,
        [("a__write".into(), "Writes (version 1)".into()), ("b__write".into(), "Writes (version 1)".into())]
    );
    gate.close();
}

/// A tool listed read-only (run without asking) is changed upstream, the change announced, and
/// the upstream then fails to list in time: while what it is now is unknown, a call to it is
/// asked about, the person told its definition could not be read again; denied it does not run,
/// approved it does. Once the upstream lists again (the tool read-only as before), it runs
/// without asking again. Before, the call ran at once on the old definition's gating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_whose_upstream_cannot_be_listed_after_a_change_is_asked_about() {
    let up = Lister::default();
    up.tools.lock().unwrap().push(read_only("t"));
    let audit = signoff::MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let (server, u) = upstream(&up, "up", Duration::from_millis(300)).await;
    let person = Person::new("deny");
    let (mcp, client) = serve(&gate, vec![u], person.clone()).await;
    assert_eq!(mcp.gating("up__t").map(|g| g.approval), Some(false));
    // Now destructive (it would ask), announced, and slower to list than the proxy waits.
    up.tools.lock().unwrap()[0].annotations = None;
    up.delay_ms.store(2_000, Ordering::SeqCst);
    server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let r = client.call_tool(call("up__t")).await.unwrap();
    assert_eq!(up.runs.load(Ordering::SeqCst), 0, "ran unasked though what it is now was unknown");
    assert_eq!(person.asked(), 1);
    let shown = person.shown.lock().unwrap()[0].clone();
    assert!(shown.contains("up__t") && shown.contains("could not be read again"), "{shown}");
    assert!(shown.contains("notes.txt"), "{shown}");
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("declined") && text(&r).contains("did not run"), "{}", text(&r));
    let records = audit.records();
    assert!(records.iter().any(|r| r.decision.as_deref() == Some("definition-unknown")), "{records:?}");

    *person.decision.lock().unwrap() = "approve";
    let r = client.call_tool(call("up__t")).await.unwrap();
    assert_eq!((person.asked(), up.runs.load(Ordering::SeqCst)), (2, 1));
    assert_eq!(text(&r), "ran");

    // The upstream lists again in time, the tool read-only as first listed: no more asking.
    up.tools.lock().unwrap()[0] = read_only("t");
    up.delay_ms.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = client.call_tool(call("up__t")).await.unwrap();
    assert_eq!(text(&r), "ran");
    assert_eq!((person.asked(), up.runs.load(Ordering::SeqCst)), (2, 2));
    gate.close();
}

/// The same in the 2026-07-28 era (the first round asks, the retry runs once approved), and for
/// a client that cannot be asked (pending elsewhere: nothing runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_whose_upstream_cannot_be_listed_after_a_change_is_asked_about_in_every_era() {
    use common::client::{Answering, lifecycle};
    for (version, approves) in [(ProtocolVersion::V_2026_07_28, true), (ProtocolVersion::V_2026_07_28, false)] {
        let up = Lister::default();
        up.tools.lock().unwrap().push(read_only("t"));
        let gate = keyed().build().unwrap();
        let (server, u) = upstream(&up, "up", Duration::from_millis(300)).await;
        let mcp = McpGate::new(gate.clone(), vec![u], &BTreeMap::new()).await.unwrap();
        up.tools.lock().unwrap()[0].annotations = None;
        up.delay_ms.store(2_000, Ordering::SeqCst);
        server.peer().notify_tool_list_changed().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let person = match approves {
            true => Answering::approve(version.clone()),
            false => Answering::deny(version.clone(), "not now"),
        };
        let (c, d) = tokio::io::duplex(1 << 20);
        let connection = mcp.connection();
        tokio::spawn(async move {
            let running = connection.serve(c).await.expect("the proxy serves");
            let _ = running.waiting().await;
        });
        let client = person.clone().serve_with_lifecycle(d, lifecycle(&version)).await.unwrap();
        let r = client.call_tool(call("up__t")).await.unwrap();
        assert_eq!(person.asked(), 1, "{version:?}");
        assert_eq!(up.runs.load(Ordering::SeqCst), usize::from(approves), "{version:?}: {}", text(&r));
        gate.close();
    }
    // A client that declared no elicitation: approval is pending elsewhere, and nothing ran.
    let up = Lister::default();
    up.tools.lock().unwrap().push(read_only("t"));
    let gate = keyed().build().unwrap();
    let (server, u) = upstream(&up, "up", Duration::from_millis(300)).await;
    let mcp = McpGate::new(gate.clone(), vec![u], &BTreeMap::new()).await.unwrap();
    up.delay_ms.store(2_000, Ordering::SeqCst);
    server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (c, d) = tokio::io::duplex(1 << 20);
    let connection = mcp.connection();
    tokio::spawn(async move {
        let running = connection.serve(c).await.expect("the proxy serves");
        let _ = running.waiting().await;
    });
    let client = ().serve_with_lifecycle(d, ClientLifecycleMode::Initialize).await.unwrap();
    let r = client.call_tool(call("up__t")).await.unwrap();
    assert!(text(&r).contains("pending elsewhere"), "{}", text(&r));
    assert_eq!(up.runs.load(Ordering::SeqCst), 0);
    assert_eq!(gate.pending().len(), 1);
    assert!(gate.pending()[0].reasons.iter().any(|r| r.contains("could not be read again")));
    gate.close();
}

/// A call carrying another gate's approval marker is asked about all the same while its tool's
/// definition is unknown: the marker approved the tool as it was listed before. It used to run
/// on the marker, unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_marker_does_not_skip_asking_while_the_definition_is_unknown() {
    let keys = signoff::TokenKeys::new("k1", signoff::Secret::generate()).unwrap();
    let up = Lister::default();
    up.tools.lock().unwrap().push(read_only("t"));
    let gate = Gate::builder().tokens(keys.clone()).build().unwrap();
    let (server, u) = upstream(&up, "up", Duration::from_millis(300)).await;
    let person = Person::new("deny");
    let (_mcp, client) = serve(&gate, vec![u], person.clone()).await;
    // A signoff gate in front of this proxy (same keys) had a person approve `up__t` with these
    // arguments, and sends its marker along.
    let outer = Gate::builder().tokens(keys).build().unwrap();
    outer.register(signoff::Tool::builder("up__t").approval(signoff::ApprovalMode::Required).build()).unwrap();
    let _approver = outer.on_request_inline(|p| {
        let _ = p.approve();
    });
    let params = call("up__t");
    let args = Value::Object(params.arguments.clone().unwrap());
    let decision = outer.confirm(signoff::ToolCall::new("up__t", args)).await.unwrap();
    let marker = outer.approval_marker("up__t", &decision).unwrap();
    let with_marker = || {
        let mut meta = rmcp::model::MetaObject::default();
        meta.insert(signoff::MARKER_META_KEY.to_owned(), json!(marker));
        let mut p = call("up__t");
        p.meta = Some(meta.into());
        p
    };

    up.tools.lock().unwrap()[0].annotations = None;
    up.delay_ms.store(2_000, Ordering::SeqCst);
    server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = client.call_tool(with_marker()).await.unwrap();
    assert_eq!(person.asked(), 1, "asked despite the marker");
    assert_eq!(up.runs.load(Ordering::SeqCst), 0, "ran on a marker for a definition no longer known");
    assert_eq!(r.is_error, Some(true));
    gate.close();
}

/// What the proxy decides for a tool (`gating`) is what its gate enforces (`evaluate`), for every
/// combination of hints, of names (one that reads, one with a keyword, one that says nothing),
/// trusted or not: a server claiming read-only and non-destructive used to get a tool the proxy
/// meant to ask about registered in a mode whose core policy took the claim and ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_enforces_exactly_what_the_proxy_decides() {
    let hint = [None, Some(true), Some(false)];
    let names = ["read_notes", "delete_notes", "frobnicate"];
    for trusted in [false, true] {
        let up = Lister::default();
        let mut made = Vec::new();
        let mut combos = Vec::new();
        for r in hint {
            for d in hint {
                for o in hint {
                    combos.push((r, d, o));
                }
            }
        }
        for (i, (r, d, o)) in combos.into_iter().enumerate() {
            for name in names {
                let mut t = tool(&format!("{name}_{i}"), json!({"type": "object"}));
                let mut hints = ToolAnnotations::default();
                (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) = (r, d, o);
                t.annotations = Some(hints);
                made.push(t.name.to_string());
                up.tools.lock().unwrap().push(t);
            }
        }
        let gate = keyed().build().unwrap();
        let (_server, u) = upstream(&up, "up", Duration::from_secs(10)).await;
        let mcp = McpGate::new(gate.clone(), vec![u.trust_annotations(trusted)], &BTreeMap::new()).await.unwrap();
        let mut asked = 0;
        for name in &made {
            let exposed = format!("up__{name}");
            let gating = mcp.gating(&exposed).unwrap();
            let enforced = gate.evaluate(&signoff::ToolCall::new(exposed.as_str(), json!({}))).unwrap().required;
            assert_eq!(enforced, gating.approval, "{exposed} (trusted: {trusted}): {gating:?}");
            asked += usize::from(gating.approval);
        }
        // Both outcomes occur, so the check above is not vacuous.
        assert!(asked > 0 && asked < made.len(), "{asked} of {}", made.len());
        gate.close();
    }
}
