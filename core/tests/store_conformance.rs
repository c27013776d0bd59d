//! The [`PendingStore`] contract, run against every store: the in-memory store, SQLite and
//! PostgreSQL (feature `postgres`). Each check below is a function of a store; `suite!` gives
//! every store every check as its own test (`memory::paging_...`, `sqlite::...`,
//! `postgres::...`).
//!
//! PostgreSQL: the server is `SIGNOFF_TEST_POSTGRES_URL` (scripts/with-postgres.sh starts a
//! private one: `scripts/with-postgres.sh cargo test -p signoff --features postgres --test
//! store_conformance`); each test works in a schema of its own. Without the URL the PostgreSQL
//! tests skip, unless `SIGNOFF_REQUIRE_POSTGRES` is set (as `make test` sets it): then they fail.
//!
//! Checks about recorded states (`record`, `transition`, `unfinished`, `restore`, `close`) apply
//! to durable stores (`is_durable()`); the in-memory store forgets by design.

use serde_json::{Value, json};
use signoff::*;
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Stores under test

/// A store under test, with whatever must outlive it (its temporary directory).
struct Subject {
    store: Arc<dyn PendingStore>,
    /// Opens the same store again, as a restarted process would (durable stores; call
    /// [`PendingStore::close`] on the first one before).
    reopen: Option<Box<dyn Fn() -> Arc<dyn PendingStore> + Send + Sync>>,
    _dir: Option<tempfile::TempDir>,
}

impl std::ops::Deref for Subject {
    type Target = dyn PendingStore;
    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

// Each factory makes a fresh, empty store for the check it is given the name of; `None` skips
// the check.

fn memory(_check: &str) -> Option<Subject> {
    Some(Subject { store: Arc::new(MemoryPendingStore::new()), reopen: None, _dir: None })
}

fn sqlite(_check: &str) -> Option<Subject> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let store = SqliteStore::open(&path).unwrap();
    Some(Subject { store, reopen: Some(Box::new(move || SqliteStore::open(&path).unwrap())), _dir: Some(dir) })
}

/// SQLite with `synchronous_full`: new requests are written by the store's own thread.
fn sqlite_full(_check: &str) -> Option<Subject> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let open = move || -> Arc<dyn PendingStore> {
        SqliteStore::open_with(&path, SqliteOptions { synchronous_full: true }).unwrap()
    };
    Some(Subject { store: open(), reopen: Some(Box::new(open)), _dir: Some(dir) })
}

/// The shared SQLite store (one file for the processes of a machine). One owner, so a reopened
/// store recovers what the first one left; no sweeper (as for PostgreSQL below).
fn sqlite_shared(check: &str) -> Option<Subject> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let owner = format!("conformance-{check}");
    let open = move || -> Arc<dyn PendingStore> {
        let options = SqliteSharedOptions { owner: Some(owner.clone()), sweep_interval: Some(Duration::ZERO) };
        SqliteSharedStore::open(&path, options).unwrap()
    };
    Some(Subject { store: open(), reopen: Some(Box::new(open)), _dir: Some(dir) })
}

#[cfg(feature = "postgres")]
#[allow(clippy::needless_update)] // options added later keep their defaults
fn postgres(check: &str) -> Option<Subject> {
    let url = std::env::var("SIGNOFF_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty());
    let Some(url) = url else {
        if std::env::var_os("SIGNOFF_REQUIRE_POSTGRES").is_some() {
            panic!(
                "SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not: run the tests through \
                 scripts/with-postgres.sh (or `make test-rust`), or point SIGNOFF_TEST_POSTGRES_URL at a server"
            );
        }
        eprintln!("skipped postgres::{check}: SIGNOFF_TEST_POSTGRES_URL is not set (see scripts/with-postgres.sh)");
        return None;
    };
    // One schema per test: tests run in parallel against one database. One owner, so a reopened
    // store recovers what the first one left. No sweeper: a request whose deadline passed stays
    // pending until a check times it out (the sweeper has tests of its own).
    let schema = format!("conformance_{}", Uuid::new_v4().simple());
    let owner = format!("conformance-{check}");
    let check = check.to_owned();
    let open = move || -> Arc<dyn PendingStore> {
        let options = PostgresOptions {
            schema: Some(schema.clone()),
            owner: Some(owner.clone()),
            sweep_interval: Some(Duration::ZERO),
            ..Default::default()
        };
        PostgresStore::connect(&url, options)
            .unwrap_or_else(|e| panic!("PostgresStore::connect({url}, schema {schema}) for {check}: {e}"))
    };
    Some(Subject { store: open(), reopen: Some(Box::new(open)), _dir: None })
}

/// Every check, as a test of the store `$factory`.
macro_rules! suite {
    ($factory:path) => {
        suite!(@tests $factory;
            insert_get_list,
            requests_round_trip_exactly,
            remove_makes_it_disappear,
            paging_2500_neither_skips_nor_repeats,
            record_of_a_new_request_is_pending,
            guarded_transitions_happy_path,
            transition_table_is_exactly_the_allowed_one,
            transition_async_table_is_exactly_the_allowed_one,
            final_states_stay_final,
            unfinished_lists_open_records_oldest_first,
            a_restart_keeps_records_and_restore_lists_pending_again,
            transition_of_an_unknown_id_is_an_error,
            racing_decisions_exactly_one_wins,
            racing_cancel_and_decisions_stay_consistent,
            many_changes_at_once_each_get_their_own_outcome,
            close_makes_later_operations_fail,
            gate_confirm_approved_is_released,
            gate_execute_approved_is_done,
            gate_calls_abandoned_or_closed_while_written_leave_nothing_pending,
            single_use_ids_are_kept_until_they_expire,
            transition_then_reports_each_change_once,
        );
    };
    (@tests $factory:path; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                if let Some(subject) = $factory(stringify!($check)) {
                    super::$check(subject);
                }
            }
        )*
    };
}

mod memory {
    suite!(super::memory);
}

mod sqlite {
    suite!(super::sqlite);
}

mod sqlite_full {
    suite!(super::sqlite_full);
}

mod sqlite_shared {
    suite!(super::sqlite_shared);
}

#[cfg(feature = "postgres")]
mod postgres {
    suite!(super::postgres);
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A point in time all requests are made relative to (1 January 2026; any fixed value works).
const T0: u64 = 1_767_225_600_000;

/// A request with an hour to wait.
fn request(created_at_ms: u64) -> Arc<ConfirmationRequest> {
    request_with(Uuid::new_v4(), created_at_ms, json!({"path": "/notes/thesis.tex"}))
}

/// A request whose deadline has passed by the time it is stored (`timeout_ms` 0): the only kind a
/// store lets time out (PostgreSQL judges deadlines by its own clock; SQLite does not judge).
fn expired_request(created_at_ms: u64) -> Arc<ConfirmationRequest> {
    let mut r = (*request(created_at_ms)).clone();
    (r.timeout_ms, r.deadline_ms) = (0, created_at_ms);
    Arc::new(r)
}

fn request_with(id: Uuid, created_at_ms: u64, arguments: Value) -> Arc<ConfirmationRequest> {
    Arc::new(
        serde_json::from_value(json!({
            "id": id,
            "tool": "delete_file",
            "description": "Deletes a file",
            "prompt": "Allow delete_file?",
            "arguments": arguments,
            "display_arguments": arguments.to_string(),
            "arguments_digest": signoff::Arguments::new(&arguments).digest(),
            "session_id": "s1",
            "editable": true,
            "reasons": ["destructive"],
            "timeout_ms": 3_600_000,
            "deadline_ms": created_at_ms + 3_600_000,
            "created_at_ms": created_at_ms,
        }))
        .unwrap(),
    )
}

fn cursor_order(v: &mut [Arc<ConfirmationRequest>]) {
    v.sort_by_key(|r| PendingCursor::of(r));
}

fn ids(v: &[Arc<ConfirmationRequest>]) -> Vec<Uuid> {
    v.iter().map(|r| r.id).collect()
}

const ALL: [RecordState; 9] = RecordState::ALL;

/// The state machine every durable store enforces (written out here, checked against
/// [`RecordState::predecessors`] by `the_table_is_the_crates`): `from → to` is allowed iff
/// listed here. `approved → cancelled` and `denied → cancelled` are
/// the gate's "recorded the answer, then found the waiting task gone" (`finish_local` in
/// core/src/gate/mod.rs).
fn allowed(from: RecordState, to: RecordState) -> bool {
    use RecordState::*;
    matches!(
        (from, to),
        (Pending, Approved | Denied | TimedOut | Cancelled)
            | (Approved, Executing | Released | Cancelled | Interrupted)
            | (Executing, Done | Interrupted)
            | (Denied, Cancelled)
    )
}

/// The table above is the one the crate states.
#[test]
fn the_table_is_the_crates() {
    for from in ALL {
        for to in ALL {
            assert_eq!(allowed(from, to), to.predecessors().contains(&from.as_str()), "{from:?} → {to:?}");
        }
    }
}

/// The allowed transitions that lead from `pending` to `state`.
fn path_to(state: RecordState) -> &'static [RecordState] {
    use RecordState::*;
    match state {
        Pending => &[],
        Approved => &[Approved],
        Executing => &[Approved, Executing],
        Done => &[Approved, Executing, Done],
        Released => &[Approved, Released],
        Denied => &[Denied],
        TimedOut => &[TimedOut],
        Cancelled => &[Cancelled],
        Interrupted => &[Approved, Interrupted],
    }
}

/// What each state records, as the gate records it (see [`StateChange`]).
struct Fields {
    arguments: Value,
    responder: String,
    token: String,
    result: Value,
    reason: String,
}

impl Fields {
    fn new(tag: &str) -> Self {
        Fields {
            arguments: json!({"path": format!("/edited/{tag}")}),
            responder: format!("alice-{tag}"),
            token: format!("fp-{tag}"),
            result: json!({"output": {"tag": tag}}),
            reason: format!("no ({tag})"),
        }
    }
    /// The change to `state` the gate would make: approved with arguments, responder, token and
    /// scope; denied with responder, token and reason; done with the result; interrupted and
    /// cancelled with a note.
    fn change(&self, state: RecordState) -> StateChange<'_> {
        use RecordState::*;
        let mut c = StateChange::to(state);
        match state {
            Approved => {
                c.arguments = Some(&self.arguments);
                c.responder = Some(&self.responder);
                c.token = Some(&self.token);
                c.scope = Some(Scope::Once);
            }
            Denied => {
                c.responder = Some(&self.responder);
                c.token = Some(&self.token);
                c.reason = Some(&self.reason);
            }
            Done | Interrupted | Cancelled => c.result = Some(&self.result),
            _ => {}
        }
        c
    }
    /// A change to `state` carrying every field: a refused one must store none of them.
    fn everything(&self, state: RecordState) -> StateChange<'_> {
        let mut c = StateChange::to(state);
        c.arguments = Some(&self.arguments);
        c.responder = Some(&self.responder);
        c.token = Some(&self.token);
        c.result = Some(&self.result);
        c.reason = Some(&self.reason);
        c.scope = Some(Scope::Session);
        c
    }
}

/// A new request moved to `state` along [`path_to`]; returns it and its record. It is made
/// expired when it is to time out (`state` is `timed-out`, or it stays `pending` and `next` is
/// `timed-out`), with an hour to wait otherwise.
fn request_in(
    s: &Subject,
    state: RecordState,
    next: Option<RecordState>,
    created_at_ms: u64,
) -> (Arc<ConfirmationRequest>, StoredRecord) {
    let times_out =
        state == RecordState::TimedOut || state == RecordState::Pending && next == Some(RecordState::TimedOut);
    let r = if times_out { expired_request(created_at_ms) } else { request(created_at_ms) };
    s.insert(r.clone()).unwrap();
    let fields = Fields::new("path");
    for step in path_to(state) {
        s.transition(&r.id, fields.change(*step)).unwrap_or_else(|e| panic!("{:?} → {step:?}: {e}", r.id));
    }
    let rec = s.record(&r.id).unwrap_or_else(|| panic!("no record of {} in {state:?}", r.id));
    assert_eq!(rec.state, state);
    (r, rec)
}

/// Resolves a pending request as the gate does: a durable store records it final (here
/// `cancelled`), then the request is removed.
fn resolve(s: &Subject, id: &Uuid) {
    if s.is_durable() {
        s.transition(id, StateChange::to(RecordState::Cancelled)).unwrap();
    }
    s.remove(id);
}

fn is_listed(s: &Subject, id: &Uuid) -> bool {
    s.list().iter().any(|r| r.id == *id)
}

// ---------------------------------------------------------------------------------------------
// Pending requests: every store

fn insert_get_list(s: Subject) {
    assert_eq!(s.len(), 0);
    assert!(s.is_empty());
    assert!(s.list().is_empty());
    assert!(s.page(None, 10).is_empty());
    assert!(s.get(&Uuid::new_v4()).is_none());

    // Inserted out of order, with two pairs made in the same millisecond (ordered by id).
    let mut made = vec![request(T0 + 2), request(T0), request(T0 + 1), request(T0 + 1), request(T0 + 3)];
    made.push(request(T0 + 3));
    for r in &made {
        s.insert(r.clone()).unwrap();
    }
    assert_eq!(s.len(), made.len());
    assert!(!s.is_empty());
    for r in &made {
        assert_eq!(s.get(&r.id).as_deref(), Some(&**r));
    }
    cursor_order(&mut made);
    assert_eq!(ids(&s.list()), ids(&made), "oldest first: created_at_ms, then id");

    // Pages in the same order.
    let first = s.page(None, 4);
    assert_eq!(ids(&first), ids(&made[..4]));
    let rest = s.page(Some(&PendingCursor::of(first.last().unwrap())), 4);
    assert_eq!(ids(&rest), ids(&made[4..]));
    assert!(s.page(Some(&PendingCursor::of(made.last().unwrap())), 4).is_empty());
    // A cursor between requests (not one of them) works too.
    let between = PendingCursor { created_at_ms: T0 + 1, id: Uuid::max() };
    assert_eq!(ids(&s.page(Some(&between), 10)), ids(&made[3..]));
}

fn requests_round_trip_exactly(s: Subject) {
    // What a request may hold, as the gate accepts it: NUL and other control characters,
    // invisible and right-to-left characters, astral characters, big and fractional numbers,
    // deep nesting (64 levels), metadata, a tool call id.
    let mut deep = json!("bottom");
    for _ in 0..63 {
        deep = json!([deep]);
    }
    let arguments = json!({
        "path": "/tmp/a\u{0}b\u{1}\u{7f}\u{202e}gpj.exe\u{200b}",
        "text": "emoji 🚀, CJK 漢字, combining e\u{301}, quote \" backslash \\ newline \n tab \t",
        "numbers": [0, -1, u64::MAX, i64::MIN, 0.1, 1e300, -2.5e-300, 123456789.123],
        "deep": deep,
        "empty": {"": [], "null": null, "bool": false},
    });
    let mut r = (*request_with(Uuid::new_v4(), T0, arguments)).clone();
    r.tool_call_id = Some("call_\u{0}1".into());
    r.metadata = json!({"agent": "é", "n": 1});
    r.prompt = "Allow \u{0}?\r\n".into();
    r.reasons = vec!["keyword \"delete\"".into(), String::new()].into();
    let r = Arc::new(r);
    s.insert(r.clone()).unwrap();
    assert_eq!(s.get(&r.id).as_deref(), Some(&*r));
    assert_eq!(s.list().first().map(|l| &**l), Some(&*r));
    if s.is_durable() {
        let rec = s.record(&r.id).unwrap();
        assert_eq!(*rec.request, *r);
        assert_eq!(s.unfinished().unwrap().first().map(|u| &*u.request), Some(&*r));
        // Approved with edited arguments of the same kind: stored as given.
        let edited = json!({"path": "\u{0}/x\u{202e}", "n": u64::MAX, "f": 0.1});
        let mut approve = StateChange::to(RecordState::Approved);
        approve.arguments = Some(&edited);
        s.transition(&r.id, approve).unwrap();
        assert_eq!(s.record(&r.id).unwrap().arguments, Some(edited));
    }
}

fn remove_makes_it_disappear(s: Subject) {
    let made = [request(T0), request(T0 + 1), request(T0 + 2)];
    for r in &made {
        s.insert(r.clone()).unwrap();
    }
    let gone = &made[1];
    if s.is_shared() {
        // A shared store lists what the database holds as pending: a request leaves the list when
        // it resolves (in any process); `remove` only forgets it here.
        s.transition(&gone.id, StateChange::to(RecordState::Cancelled)).unwrap();
        let _ = s.remove(&gone.id);
    } else {
        assert_eq!(s.remove(&gone.id).as_deref(), Some(&**gone), "remove returns the request it removed");
    }
    assert!(s.get(&gone.id).is_none(), "removed, yet get still finds it");
    assert_eq!(ids(&s.list()), [made[0].id, made[2].id]);
    assert_eq!(ids(&s.page(None, 10)), [made[0].id, made[2].id]);
    assert_eq!(ids(&s.page(Some(&PendingCursor::of(&made[0])), 10)), [made[2].id]);
    assert_eq!(s.len(), 2);
    assert!(s.remove(&gone.id).is_none(), "removed once");
    assert!(s.remove(&Uuid::new_v4()).is_none());
    for r in [&made[0], &made[2]] {
        if s.is_shared() {
            s.transition(&r.id, StateChange::to(RecordState::Cancelled)).unwrap();
        } else {
            assert!(s.remove(&r.id).is_some());
        }
    }
    assert!(s.is_empty() && s.list().is_empty() && s.page(None, 10).is_empty());
}

fn paging_2500_neither_skips_nor_repeats(s: Subject) {
    // 2,500 requests over 97 milliseconds: many share a millisecond, so the id decides.
    let mut made: Vec<_> = (0..2_500u64).map(|i| request(T0 + (i * 31) % 97)).collect();
    for r in &made {
        s.insert(r.clone()).unwrap();
    }
    assert_eq!(s.len(), 2_500);
    let mut seen: Vec<Arc<ConfirmationRequest>> = Vec::new();
    let mut resolved_unseen = HashSet::new();
    let mut after: Option<PendingCursor> = None;
    let mut pages = 0;
    loop {
        let page = s.page(after.as_ref(), 1_000);
        assert!(page.len() <= 1_000);
        pages += 1;
        seen.extend(page.iter().cloned());
        if page.len() < 1_000 {
            break;
        }
        after = Some(PendingCursor::of(page.last().unwrap()));
        if pages == 1 {
            // While paging: new requests (made now, so after every cursor) appear on a later page;
            // a request resolved before its page is not shown; one resolved after it was shown
            // moves nothing.
            for i in 0..150 {
                let r = request(T0 + 1_000 + i % 7);
                s.insert(r.clone()).unwrap();
                made.push(r);
            }
            let mut order = made.clone();
            cursor_order(&mut order);
            for r in [&order[1_500], &order[2_000], &order[2_600]] {
                resolve(&s, &r.id);
                resolved_unseen.insert(r.id);
            }
            resolve(&s, &order[10].id); // already shown
        }
    }
    assert!(pages >= 3, "{pages} pages");
    let mut expected: Vec<_> = made.into_iter().filter(|r| !resolved_unseen.contains(&r.id)).collect();
    cursor_order(&mut expected);
    let unique: HashSet<Uuid> = seen.iter().map(|r| r.id).collect();
    assert_eq!(unique.len(), seen.len(), "no request is shown twice");
    assert_eq!(seen.len(), expected.len(), "every request that stayed pending is shown");
    assert!(ids(&seen) == ids(&expected), "shown in cursor order, each exactly once");
}

// ---------------------------------------------------------------------------------------------
// Recorded states: durable stores

fn record_of_a_new_request_is_pending(s: Subject) {
    let r = request(T0);
    s.insert(r.clone()).unwrap();
    if !s.is_durable() {
        assert!(s.record(&r.id).is_none(), "a store that forgets keeps no record");
        return;
    }
    let rec = s.record(&r.id).unwrap();
    assert_eq!(rec.state, RecordState::Pending);
    assert_eq!(*rec.request, *r);
    assert_eq!((rec.arguments, rec.responder, rec.token, rec.result), (None, None, None, None));
    assert!(s.record(&Uuid::new_v4()).is_none());
    // The same id twice is refused: a request is stored once.
    assert!(s.insert(request_with(r.id, T0 + 5, json!({}))).is_err(), "a second insert of one id");
    assert_eq!(*s.record(&r.id).unwrap().request, *r);
}

fn guarded_transitions_happy_path(s: Subject) {
    if !s.is_durable() {
        return;
    }
    let r = request(T0);
    s.insert(r.clone()).unwrap();
    let f = Fields::new("happy");
    s.transition(&r.id, f.change(RecordState::Approved)).unwrap();
    let rec = s.record(&r.id).unwrap();
    assert_eq!(rec.state, RecordState::Approved);
    assert_eq!(rec.arguments.as_ref(), Some(&f.arguments));
    assert_eq!(rec.responder.as_deref(), Some(f.responder.as_str()));
    assert_eq!(rec.token.as_deref(), Some(f.token.as_str()));
    assert_eq!(rec.result, None);
    assert!(rec.updated_at_ms >= T0);
    // No longer waiting for a person: not listed as pending.
    assert!(s.get(&r.id).is_none() && !is_listed(&s, &r.id) && s.is_empty());

    s.transition(&r.id, StateChange::to(RecordState::Executing)).unwrap();
    assert_eq!(s.record(&r.id).unwrap().state, RecordState::Executing);
    s.transition(&r.id, f.change(RecordState::Done)).unwrap();
    let done = s.record(&r.id).unwrap();
    assert_eq!(done.state, RecordState::Done);
    assert_eq!(done.result.as_ref(), Some(&f.result));
    // What the approval recorded stays.
    assert_eq!(done.arguments.as_ref(), Some(&f.arguments));
    assert_eq!(done.responder.as_deref(), Some(f.responder.as_str()));
    assert_eq!(done.token.as_deref(), Some(f.token.as_str()));
    assert_eq!(*done.request, *r);
    assert!(done.updated_at_ms >= rec.updated_at_ms);
}

fn transition_table_is_exactly_the_allowed_one(s: Subject) {
    transition_table(s, false)
}

/// The same table through [`PendingStore::transition_async`] (SQLite with `synchronous_full`
/// hands it to its writer thread, PostgreSQL to its runtime).
fn transition_async_table_is_exactly_the_allowed_one(s: Subject) {
    transition_table(s, true)
}

fn transition_table(s: Subject, asynchronous: bool) {
    if !s.is_durable() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let transition = |id: &Uuid, change: StateChange<'_>| -> Result<()> {
        if asynchronous { rt.block_on(s.transition_async(*id, change.into())) } else { s.transition(id, change) }
    };
    let mut wrong = Vec::new();
    let mut t = T0;
    for from in ALL {
        for to in ALL {
            t += 1;
            let (r, before) = request_in(&s, from, Some(to), t);
            let was_listed = from == RecordState::Pending;
            assert_eq!(is_listed(&s, &r.id), was_listed);
            let f = Fields::new("table");
            if allowed(from, to) {
                if let Err(e) = transition(&r.id, f.change(to)) {
                    wrong.push(format!("{from:?} → {to:?} refused: {e}"));
                    continue;
                }
                let after = s.record(&r.id).unwrap();
                if after.state != to {
                    wrong.push(format!("{from:?} → {to:?} accepted but the record is {:?}", after.state));
                }
                let c = f.change(to);
                if c.arguments.is_some() && after.arguments.as_ref() != c.arguments
                    || c.responder.is_some() && after.responder.as_deref() != c.responder
                    || c.token.is_some() && after.token.as_deref() != c.token
                    || c.result.is_some() && after.result.as_ref() != c.result
                {
                    wrong.push(format!("{from:?} → {to:?}: the change's fields were not stored: {after:?}"));
                }
                if is_listed(&s, &r.id) || s.get(&r.id).is_some() {
                    wrong.push(format!("{from:?} → {to:?}: still listed as pending"));
                }
            } else {
                if transition(&r.id, f.everything(to)).is_ok() {
                    wrong.push(format!("{from:?} → {to:?} accepted"));
                    continue;
                }
                let after = s.record(&r.id).unwrap();
                if after != before {
                    wrong.push(format!("{from:?} → {to:?} refused but changed the record: {before:?} → {after:?}"));
                }
                if is_listed(&s, &r.id) != was_listed || s.get(&r.id).is_some() != was_listed {
                    wrong.push(format!(
                        "{from:?} → {to:?} refused but changed the pending list: listed before {was_listed}, \
                         after {}, get after {}",
                        is_listed(&s, &r.id),
                        s.get(&r.id).is_some()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} of 81 (from, to) pairs differ from the table:\n{}", wrong.len(), wrong.join("\n"));
}

fn final_states_stay_final(s: Subject) {
    if !s.is_durable() {
        return;
    }
    let mut t = T0;
    for from in ALL.into_iter().filter(|st| st.is_final()) {
        for to in ALL {
            // The one exception (see `allowed`): a recorded denial whose waiter is gone is
            // recorded as cancelled.
            if (from, to) == (RecordState::Denied, RecordState::Cancelled) {
                continue;
            }
            t += 1;
            let (r, before) = request_in(&s, from, Some(to), t);
            assert!(s.transition(&r.id, Fields::new("final").everything(to)).is_err(), "{from:?} → {to:?}");
            assert_eq!(s.record(&r.id).unwrap(), before, "{from:?} → {to:?} changed the record");
        }
    }
}

fn unfinished_lists_open_records_oldest_first(s: Subject) {
    if !s.is_durable() {
        assert!(s.unfinished().unwrap().is_empty());
        return;
    }
    assert!(s.unfinished().unwrap().is_empty());
    // Made in an order unrelated to their ages; every state once, twice over.
    let mut open = Vec::new();
    for (i, state) in ALL.iter().chain(ALL.iter()).enumerate() {
        let created = T0 + ((i as u64 * 7) % 18) * 10;
        let (r, _) = request_in(&s, *state, None, created);
        if !state.is_final() {
            open.push((created, r.id, *state));
        }
    }
    open.sort_by_key(|(created, id, _)| (*created, *id));
    let got = s.unfinished().unwrap();
    let got: Vec<_> = got.iter().map(|u| (u.request.created_at_ms, u.request.id, u.state)).collect();
    assert_eq!(got, open, "pending, approved and executing, oldest first; nothing final");
}

fn a_restart_keeps_records_and_restore_lists_pending_again(s: Subject) {
    if !s.is_durable() {
        return;
    }
    let (pending, _) = request_in(&s, RecordState::Pending, None, T0);
    let (approved, approved_rec) = request_in(&s, RecordState::Approved, None, T0 + 1);
    let (executing, _) = request_in(&s, RecordState::Executing, None, T0 + 2);
    let (done, done_rec) = request_in(&s, RecordState::Done, None, T0 + 3);
    s.close();
    let again = (s.reopen.as_ref().expect("a durable store can be opened again"))();
    let same = |a: &StoredRecord, b: &StoredRecord| {
        (&a.request, a.state, &a.arguments, &a.responder, &a.token, &a.result)
            == (&b.request, b.state, &b.arguments, &b.responder, &b.token, &b.result)
    };
    // What the first store left unfinished, oldest first, as it left it.
    let left = again.unfinished().unwrap();
    let states: Vec<_> = left.iter().map(|u| (u.request.id, u.state)).collect();
    assert_eq!(
        states,
        [
            (pending.id, RecordState::Pending),
            (approved.id, RecordState::Approved),
            (executing.id, RecordState::Executing)
        ]
    );
    assert!(same(&left[1], &approved_rec), "{:?} != {approved_rec:?}", left[1]);
    assert!(same(&again.record(&done.id).unwrap(), &done_rec));
    // As a restarted gate does: the pending one is made visible again (once, however often).
    again.restore(left[0].request.clone());
    again.restore(left[0].request.clone());
    assert_eq!(again.get(&pending.id).as_deref(), Some(&*pending));
    assert_eq!(ids(&again.list()), [pending.id]);
    assert_eq!(ids(&again.page(None, 10)), [pending.id]);
    assert_eq!(again.len(), 1);
    assert_eq!(again.record(&pending.id).unwrap().state, RecordState::Pending);
    // And it resolves like any other.
    again.transition(&pending.id, StateChange::to(RecordState::Denied)).unwrap();
    assert!(again.get(&pending.id).is_none() && again.list().is_empty() && again.is_empty());
    again.close();
}

fn transition_of_an_unknown_id_is_an_error(s: Subject) {
    if !s.is_durable() {
        return;
    }
    let unknown = Uuid::new_v4();
    let f = Fields::new("unknown");
    for to in ALL {
        let e = s.transition(&unknown, f.change(to)).expect_err(to.as_str());
        assert_eq!(e.kind(), ErrorKind::Store, "{to:?}: {e}");
    }
    assert!(s.record(&unknown).is_none(), "a refused transition creates nothing");
    assert!(s.unfinished().unwrap().is_empty());
}

/// Runs `rounds` races: for each, a new pending request, then 8 threads at once, thread `i`
/// moving it to `targets[i % targets.len()]`. Returns, per round, each thread's target, result
/// and the record afterwards.
fn race(s: &Subject, rounds: usize, targets: &[RecordState]) -> Vec<(Vec<(RecordState, bool)>, StoredRecord)> {
    let fields: Vec<Fields> = (0..8).map(|i| Fields::new(&format!("t{i}"))).collect();
    (0..rounds)
        .map(|round| {
            let r = request(T0 + round as u64);
            s.insert(r.clone()).unwrap();
            let barrier = Barrier::new(8);
            let results = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..8)
                    .map(|i| {
                        let (barrier, f, id) = (&barrier, &fields[i], r.id);
                        let to = targets[i % targets.len()];
                        scope.spawn(move || {
                            barrier.wait();
                            (to, s.transition(&id, f.change(to)).is_ok())
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
            });
            (results, s.record(&r.id).unwrap())
        })
        .collect()
}

fn racing_decisions_exactly_one_wins(s: Subject) {
    if !s.is_durable() {
        return;
    }
    // Each of these is allowed from `pending` only: one answer wins, the others are refused.
    let targets = [RecordState::Approved, RecordState::Denied, RecordState::TimedOut];
    for (round, (results, rec)) in race(&s, 200, &targets).into_iter().enumerate() {
        let winners: Vec<_> = results.iter().enumerate().filter(|(_, (_, ok))| *ok).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let (i, (to, _)) = winners[0];
        assert_eq!(rec.state, *to, "round {round}");
        if *to != RecordState::TimedOut {
            assert_eq!(rec.responder.as_deref(), Some(format!("alice-t{i}").as_str()), "round {round}: the winner's");
        }
    }
}

/// Hundreds of new requests and changes submitted at once (as a busy agent's calls make them;
/// a store may batch them into shared statements): each caller still gets its own outcome, and
/// each record gets its own fields.
fn many_changes_at_once_each_get_their_own_outcome(s: Subject) {
    if !s.is_durable() {
        return;
    }
    const N: usize = 300;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let requests: Vec<_> = (0..N).map(|i| request(T0 + i as u64)).collect();
    let fields: Vec<(Fields, Fields)> =
        (0..N).map(|i| (Fields::new(&format!("yes{i}")), Fields::new(&format!("no{i}")))).collect();
    rt.block_on(async {
        let mut inserts = Vec::new();
        for r in &requests {
            match s.insert_async(r.clone(), Default::default()) {
                Some(f) => inserts.push(f),
                None => s.insert(r.clone()).unwrap(),
            }
        }
        for r in futures_util::future::join_all(inserts).await {
            r.unwrap();
        }
    });
    // Every third is cancelled first: both answers to it must be refused.
    for r in requests.iter().step_by(3) {
        s.transition(&r.id, StateChange::to(RecordState::Cancelled)).unwrap();
    }
    // An approval and a denial for every request at once: one of the two wins each pending one.
    let answers =
        rt.block_on(futures_util::future::join_all(requests.iter().zip(&fields).flat_map(|(r, (yes, no))| {
            [
                s.transition_async(r.id, yes.change(RecordState::Approved).into()),
                s.transition_async(r.id, no.change(RecordState::Denied).into()),
            ]
        })));
    let mut approved = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let (yes, no) = (&answers[2 * i], &answers[2 * i + 1]);
        let rec = s.record(&r.id).unwrap();
        if i % 3 == 0 {
            assert!(yes.is_err() && no.is_err(), "request {i} was cancelled, yet: {yes:?} {no:?}");
            assert_eq!(rec.state, RecordState::Cancelled, "request {i}");
            continue;
        }
        assert!(yes.is_ok() != no.is_ok(), "request {i}: exactly one answer wins: {yes:?} {no:?}");
        let (state, f) =
            if yes.is_ok() { (RecordState::Approved, &fields[i].0) } else { (RecordState::Denied, &fields[i].1) };
        assert_eq!(rec.state, state, "request {i}");
        assert_eq!(rec.responder.as_deref(), Some(f.responder.as_str()), "request {i}: the winner's responder");
        assert_eq!(rec.token.as_deref(), Some(f.token.as_str()), "request {i}: the winner's token");
        if state == RecordState::Approved {
            assert_eq!(rec.arguments.as_ref(), Some(&f.arguments), "request {i}: the winner's arguments");
            approved.push(i);
        } else {
            assert_eq!(rec.reason.as_deref(), Some(f.reason.as_str()), "request {i}: the winner's reason");
        }
    }
    assert!(!approved.is_empty());
    // Then every approved call starts and finishes at once, each with a result of its own.
    for state in [RecordState::Executing, RecordState::Done] {
        let done = rt.block_on(futures_util::future::join_all(
            approved.iter().map(|&i| s.transition_async(requests[i].id, fields[i].0.change(state).into())),
        ));
        assert!(done.iter().all(Result::is_ok), "{state:?}: {done:?}");
    }
    for &i in &approved {
        let rec = s.record(&requests[i].id).unwrap();
        assert_eq!(rec.state, RecordState::Done, "request {i}");
        assert_eq!(rec.result.as_ref(), Some(&fields[i].0.result), "request {i}: its own result");
        assert_eq!(rec.arguments.as_ref(), Some(&fields[i].0.arguments), "request {i}: approved arguments kept");
    }
}

fn racing_cancel_and_decisions_stay_consistent(s: Subject) {
    if !s.is_durable() {
        return;
    }
    // Approve, deny and cancel at once. `cancelled` is also allowed after `approved` and
    // `denied` (see `allowed`), so up to two succeed: one answer, then one cancellation.
    let targets = [RecordState::Approved, RecordState::Denied, RecordState::Cancelled];
    for (round, (results, rec)) in race(&s, 200, &targets).into_iter().enumerate() {
        let won = |st: RecordState| results.iter().filter(|(to, ok)| *ok && *to == st).count();
        let (approved, denied, cancelled) =
            (won(RecordState::Approved), won(RecordState::Denied), won(RecordState::Cancelled));
        assert!(cancelled <= 1, "round {round}: two cancellations won: {results:?}");
        assert!(approved + denied <= 1, "round {round}: two answers won: {results:?}");
        assert!(approved + denied + cancelled >= 1, "round {round}: nobody won: {results:?}");
        let expected = if cancelled == 1 {
            RecordState::Cancelled
        } else if approved == 1 {
            RecordState::Approved
        } else {
            RecordState::Denied
        };
        assert_eq!(rec.state, expected, "round {round}: {results:?}");
    }
}

fn close_makes_later_operations_fail(s: Subject) {
    let r = request(T0);
    s.insert(r.clone()).unwrap();
    if !s.is_durable() {
        s.close();
        return;
    }
    let (open, _) = request_in(&s, RecordState::Approved, None, T0 + 1);
    s.close();
    let e = s.insert(request(T0 + 2)).expect_err("insert after close");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    let e = s.transition(&r.id, StateChange::to(RecordState::Denied)).expect_err("transition after close");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    let e = s.transition(&open.id, StateChange::to(RecordState::Executing)).expect_err("executing after close");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert_eq!(s.unfinished().expect_err("unfinished after close").kind(), ErrorKind::Store);
    s.close(); // idempotent
}

// ---------------------------------------------------------------------------------------------
// Through a gate

fn gate_on(s: &Subject, runs: Arc<std::sync::atomic::AtomicUsize>) -> Gate {
    let store = s.store.clone();
    Gate::builder()
        .store(s.store.clone())
        .deny_when_unobserved(false)
        .tool(
            Tool::builder("delete_file")
                .description("Deletes a file")
                .approval(ApprovalMode::Required)
                .executor_with_context(move |a, cx| {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // A durable store has recorded `executing` before the tool starts.
                    let recorded = cx.request_id.and_then(|id| store.record(&id)).map(|r| r.state);
                    let expected = if store.is_durable() { Some(RecordState::Executing) } else { None };
                    async move {
                        if recorded != expected {
                            return Err(format!("the store says {recorded:?} as the tool starts"));
                        }
                        Ok(json!({"deleted": a["path"]}))
                    }
                })
                .build(),
        )
        .build()
        .unwrap()
}

/// The request the gate lists, once it lists one; checks the store lists the same.
async fn listed(gate: &Gate, s: &Subject) -> Arc<ConfirmationRequest> {
    let start = std::time::Instant::now();
    loop {
        let pending = gate.pending();
        if let Some(r) = pending.first() {
            assert_eq!(pending.len(), 1);
            assert_eq!(ids(&s.list()), [r.id]);
            assert_eq!(s.get(&r.id).as_deref(), Some(&**r));
            assert_eq!(gate.pending_request(&r.id).as_deref(), Some(&**r));
            assert_eq!(gate.pending_count(), 1);
            return r.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the request was never listed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn gate_confirm_approved_is_released(s: Subject) {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = gate_on(&s, runs.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let g = gate.clone();
        let call = ToolCall::new("delete_file", json!({"path": "/notes/old.txt"})).session("s1");
        let task = tokio::spawn(async move { g.confirm(call).await });
        let req = listed(&gate, &s).await;
        assert_eq!((&*req.tool, &req.arguments.value()), ("delete_file", &json!({"path": "/notes/old.txt"})));
        if s.is_durable() {
            assert_eq!(gate.record(&req.id).unwrap().state, RecordState::Pending);
        }
        assert_eq!(
            gate.respond(ConfirmationResponse::approve(&req).with_responder("alice")).unwrap(),
            Outcome::Approved
        );
        let decision = task.await.unwrap().unwrap();
        assert!(decision.is_approved(), "{decision:?}");
        assert_eq!(decision.request_id(), Some(req.id));
        assert!(gate.pending().is_empty() && s.is_empty());
        if s.is_durable() {
            let rec = gate.record(&req.id).unwrap();
            assert_eq!(rec.state, RecordState::Released, "{rec:?}");
            assert_eq!(rec.responder.as_deref(), Some("alice"));
            assert_eq!(rec.arguments, Some(json!({"path": "/notes/old.txt"})));
        } else {
            assert!(gate.record(&req.id).is_none());
        }
    });
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "confirm never runs the tool");
    gate.close();
}

fn gate_execute_approved_is_done(s: Subject) {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = gate_on(&s, runs.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let g = gate.clone();
        let call = ToolCall::new("delete_file", json!({"path": "/notes/draft.txt"})).call_id("call_1");
        let task = tokio::spawn(async move { g.execute(call).await });
        let req = listed(&gate, &s).await;
        gate.respond(ConfirmationResponse::approve(&req).with_responder("bob")).unwrap();
        let result = task.await.unwrap();
        assert!(result.status.ran(), "{result:?}");
        assert_eq!(result.output, Some(json!({"deleted": "/notes/draft.txt"})));
        assert!(gate.pending().is_empty() && s.is_empty());
        if s.is_durable() {
            let rec = gate.record(&req.id).unwrap();
            assert_eq!(rec.state, RecordState::Done, "{rec:?}");
            assert_eq!(rec.responder.as_deref(), Some("bob"));
            let stored = rec.result.expect("the result is stored");
            assert_eq!(stored["output"], json!({"deleted": "/notes/draft.txt"}));
            assert_eq!(stored["call_id"], json!("call_1"));
        }
    });
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    gate.close();
}

/// Calls dropped at every moment around the store's write, then a gate closed while requests
/// are being written: every call ends, nothing stays pending, and nothing unfinished is left
/// for a restart to restore.
fn gate_calls_abandoned_or_closed_while_written_leave_nothing_pending(s: Subject) {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = gate_on(&s, runs.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        for i in 0..30u64 {
            let g = gate.clone();
            let call = tokio::spawn(async move {
                g.execute(ToolCall::new("delete_file", json!({"path": format!("/a/{i}")}))).await
            });
            tokio::time::sleep(Duration::from_micros(i * 40)).await;
            call.abort();
            let _ = call.await;
        }
        let calls: Vec<_> = (0..30)
            .map(|i| {
                let g = gate.clone();
                tokio::spawn(async move {
                    g.execute(ToolCall::new("delete_file", json!({"path": format!("/c/{i}")}))).await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_micros(300)).await;
        gate.close();
        for c in calls {
            let r = c.await.unwrap();
            assert!(!r.status.ran(), "{r:?}");
        }
    });
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0);
    if let Some(reopen) = &s.reopen {
        let again = reopen();
        let t = std::time::Instant::now();
        loop {
            let left = again.unfinished().unwrap();
            if left.is_empty() {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "{} requests left unfinished", left.len());
            std::thread::sleep(Duration::from_millis(20));
        }
        again.close();
    }
}

fn single_use_ids_are_kept_until_they_expire(s: Subject) {
    let now = signoff::event::now_ms();
    let (live, expired) = (Uuid::new_v4(), Uuid::new_v4());
    assert!(s.use_once(&live, now + 60_000).unwrap());
    // Expired two hours ago: past the hour a shared store keeps ids for hosts whose clocks lag.
    assert!(s.use_once(&expired, now.saturating_sub(2 * 3_600_000)).unwrap());
    if !s.is_durable() {
        // A store that forgets leaves single use to the gate's memory.
        assert!(s.use_once(&live, now + 60_000).unwrap());
        return;
    }
    assert!(!s.use_once(&live, now + 60_000).unwrap(), "a replay is refused");
    // An expired acceptance is forgotten (the marker itself is refused by its expiry).
    assert!(s.use_once(&expired, now + 60_000).unwrap());
    s.close();
    let again = (s.reopen.as_ref().expect("a durable store can be opened again"))();
    assert!(!again.use_once(&live, now + 60_000).unwrap(), "a replay after a restart is refused");
    assert!(again.use_once(&Uuid::new_v4(), now + 60_000).unwrap());
    again.close();
    assert_eq!(again.use_once(&Uuid::new_v4(), now + 60_000).unwrap_err().kind(), ErrorKind::Store);
}

fn transition_then_reports_each_change_once(s: Subject) {
    if !s.is_durable() {
        return;
    }
    let (ok, _) = request_in(&s, RecordState::Pending, None, T0);
    let (tx, rx) = std::sync::mpsc::channel();
    let report = |tx: &std::sync::mpsc::Sender<(u8, Result<()>)>, n: u8| {
        let tx = tx.clone();
        Completion::new(move |r| tx.send((n, r)).unwrap())
    };
    s.transition_then(ok.id, OwnedStateChange::to(RecordState::Approved), report(&tx, 1));
    // Refused by the transition table: the completion says so.
    s.transition_then(ok.id, OwnedStateChange::to(RecordState::Pending), report(&tx, 2));
    s.transition_then(Uuid::new_v4(), OwnedStateChange::to(RecordState::Denied), report(&tx, 3));
    let mut got: Vec<(u8, bool)> =
        (0..3).map(|_| rx.recv_timeout(Duration::from_secs(10)).map(|(n, r)| (n, r.is_ok())).unwrap()).collect();
    got.sort();
    assert_eq!(got, [(1, true), (2, false), (3, false)]);
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "each completion runs once");
    assert_eq!(s.record(&ok.id).unwrap().state, RecordState::Approved);
    s.close();
    // Closed: refused, and still reported.
    s.transition_then(ok.id, OwnedStateChange::to(RecordState::Executing), report(&tx, 4));
    let (n, r) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!((n, r.unwrap_err().kind()), (4, ErrorKind::Store));
}
