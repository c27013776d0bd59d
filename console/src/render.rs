//! Server-side HTML: every string a request carries is escaped here, once, so the browser only
//! ever inserts markup this module wrote. Text comes through the core's display escaping first
//! (invisible and deceptive code points become visible `\u{...}` escapes), then HTML escaping.

use serde_json::Value;
use signoff::display::escape_for_display;
use signoff::{AuditKind, AuditRecord, ConfirmationRequest, ConfirmationResolved, Gate, Outcome, Scope};
use std::fmt::Write;

/// HTML-escapes `s` for text and double-quoted attribute values.
pub(crate) fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text as a person should see it: deceptive code points made visible, then HTML-escaped.
pub(crate) fn text(s: &str) -> String {
    html(&escape_for_display(s))
}

/// The risk shown for a request, and its kind (the badge's `data-risk` and class): `metadata.risk`
/// when the caller set one (the MCP gate sets `L0`..`L5`: kind `l0`..`l5`; anything else is
/// shown as given, kind `other`), else what the tool's hints say (`destructive`, `read-only`).
/// A tool with no hint, or one this process does not know, gets the neutral kind `none`: no
/// alarm, and no claim that it is safe either.
fn risk(gate: &Gate, request: &ConfirmationRequest) -> (String, &'static str) {
    const LEVELS: [&str; 6] = ["l0", "l1", "l2", "l3", "l4", "l5"];
    let level = |n: u64| usize::try_from(n).ok().and_then(|n| LEVELS.get(n)).copied();
    match request.metadata.get("risk") {
        Some(Value::String(s)) => {
            let kind = s.strip_prefix('L').filter(|d| d.len() == 1).and_then(|d| d.parse().ok()).and_then(level);
            return (s.clone(), kind.unwrap_or("other"));
        }
        Some(Value::Number(n)) => {
            return match n.as_u64().and_then(level) {
                Some(kind) => (format!("L{n}"), kind),
                None => (n.to_string(), "other"),
            };
        }
        _ => {}
    }
    match gate.tool_spec(&request.tool) {
        Some(spec) if spec.destructive => ("destructive".into(), "destructive"),
        Some(spec) if spec.read_only => ("read-only".into(), "read-only"),
        Some(_) => ("no risk hint".into(), "none"),
        None => ("risk unknown (tool registered in another process)".into(), "none"),
    }
}

/// What a risk badge's tooltip says about its kind.
fn risk_title(kind: &str) -> &'static str {
    match kind {
        "none" => {
            "the tool gives no hint about its risk (neither destructive nor read-only): not a sign that it is safe"
        }
        "destructive" => "the tool says it destroys or changes something irreversibly",
        "read-only" => "the tool says it only reads",
        "other" => "risk as the caller gave it",
        _ => "risk level, L0 (harmless) to L5 (highest): see the legend",
    }
}

/// The human label of the client behind a request's session: `metadata.client` when the caller
/// set one (the MCP gate sets the client's name and version from `initialize`, e.g.
/// `claude-code 1.2.3`). Self-declared by the client: shown with the session id, never instead.
pub(crate) fn client_label(request: &ConfirmationRequest) -> Option<String> {
    match request.metadata.get("client") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        _ => None,
    }
}

/// `s` cut to `n` characters, with `…` when it was longer.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() > n { format!("{}…", s.chars().take(n).collect::<String>()) } else { s.to_owned() }
}

/// How a session is named in badges, buttons and notifications: its id (cut to 40 characters),
/// or with a client label, the label (cut to 40) and the id's start, so that two sessions of one
/// client stay apart.
fn session_name(session: &str, client: Option<&str>) -> String {
    match client {
        Some(c) => format!("{} · {}", cut(c, 40), cut(session, 12)),
        None => cut(session, 40),
    }
}

/// One pending request as a card. Everything a decision depends on is in the card's data
/// attributes (id, digest, deadline, session), and the editor holds the arguments as JSON.
pub(crate) fn card(gate: &Gate, r: &ConfirmationRequest) -> String {
    let mut h = String::with_capacity(1024 + r.arguments.json().len() * 2);
    let session = text(&r.session_id);
    let client = client_label(r);
    let name = session_name(&r.session_id, client.as_deref());
    let _ = write!(
        h,
        r#"<li class="request" data-id="{id}" data-digest="{digest}" data-session="{session_attr}" data-session-shown="{shown}" data-session-id="{session}" data-deadline="{deadline}" data-created="{created}" data-editable="{editable}">"#,
        id = r.id,
        digest = html(&r.arguments_digest.to_string()),
        session_attr = html(&r.session_id),
        shown = text(&name),
        deadline = r.deadline_ms,
        created = r.created_at_ms,
        editable = r.editable,
    );
    let (risk, kind) = risk(gate, r);
    let _ = write!(
        h,
        r#"<header><span class="tool">{tool}</span> <span class="risk risk-{kind}" data-risk="{kind}" title="{title}">{risk}</span> <span class="countdown" aria-live="off"></span></header>"#,
        tool = text(&r.tool),
        title = html(risk_title(kind)),
        risk = text(&risk),
    );
    let _ = write!(h, r#"<p class="description">{}</p>"#, text(&r.description));
    match &client {
        // The client's own name for itself, then the session id it stands for.
        Some(c) => {
            let _ = write!(
                h,
                r#"<dl class="meta"><dt>session</dt><dd class="session" title="session id: {session}"><span class="client">{client}</span> <small class="session-id">{session}</small>"#,
                client = text(c),
            );
        }
        None => {
            h.push_str(r#"<dl class="meta"><dt>session</dt><dd class="session">"#);
            h.push_str(&session);
        }
    }
    h.push_str(r#"</dd><dt>why asked</dt><dd><ul class="reasons">"#);
    for reason in r.reasons.iter() {
        let _ = write!(h, "<li>{}</li>", text(reason));
    }
    if r.reasons.is_empty() {
        h.push_str("<li>the tool requires approval</li>");
    }
    h.push_str("</ul></dd>");
    if let Some(call) = &r.tool_call_id {
        let _ = write!(h, r#"<dt>call</dt><dd class="call-id">{}</dd>"#, text(call));
    }
    h.push_str("</dl>");
    // display_arguments already escapes every deceptive code point; nothing is truncated.
    let _ = write!(h, r#"<pre class="arguments">{}</pre>"#, html(&r.display_arguments()));
    let _ = write!(
        h,
        r#"<div class="actions"><button type="button" data-action="approve" title="scope: once">Approve once</button> <button type="button" data-action="session" title="scope: session {session}">Approve for session {label}</button> <button type="button" data-action="deny">Deny…</button>{edit}</div>"#,
        label = text(&name),
        edit = if r.editable { r#" <button type="button" data-action="edit">Edit…</button>"# } else { "" },
    );
    h.push_str(
        r#"<div class="deny-box" hidden><label>Reason (required, shown to the model)<textarea class="deny-reason" rows="2"></textarea></label><button type="button" data-action="confirm-deny" disabled>Deny with this reason</button> <button type="button" data-action="cancel">Cancel</button></div>"#,
    );
    if r.editable {
        let pretty = serde_json::to_string_pretty(&r.arguments.value()).unwrap_or_default();
        let _ = write!(
            h,
            r#"<div class="edit-box" hidden><label>Arguments (JSON)<textarea class="editor" rows="8" spellcheck="false">{}</textarea></label><button type="button" data-action="check-edit">Check</button> <button type="button" data-action="submit-edit" disabled>Approve once with these arguments</button> <button type="button" data-action="cancel">Cancel</button><div class="edit-errors" role="alert"></div><ul class="diff"></ul></div>"#,
            html(&pretty)
        );
    }
    h.push_str(r#"<p class="status" role="status"></p></li>"#);
    h
}

fn outcome_label(o: Outcome) -> &'static str {
    match o {
        Outcome::Approved => "approved",
        Outcome::Denied => "denied",
        Outcome::TimedOut => "timed out",
        Outcome::Cancelled => "cancelled",
    }
}

/// One decided request in the history list; `client` is the label its card showed
/// ([`client_label`]).
pub(crate) fn history_row(r: &ConfirmationResolved, client: Option<&str>) -> String {
    let mut h = String::with_capacity(256);
    let _ = write!(
        h,
        r#"<li class="decided outcome-{kind}" data-id="{id}" data-outcome="{kind}"><span class="outcome">{label}</span> <span class="tool">{tool}</span>"#,
        kind = r.outcome.as_str(),
        id = r.id,
        label = outcome_label(r.outcome),
        tool = text(&r.tool),
    );
    if r.outcome == Outcome::Approved && r.scope == Scope::Session {
        h.push_str(r#" <span class="scope">for the session</span>"#);
    }
    if r.edited {
        h.push_str(r#" <span class="edited">with edited arguments</span>"#);
    }
    if let Some(who) = &r.responder {
        let _ = write!(h, r#" by <span class="responder">{}</span>"#, text(who));
    }
    if let Some(c) = r.cancel_reason {
        let _ = write!(h, r#" <span class="cancel-reason">({})</span>"#, c.as_str());
    }
    match client {
        Some(c) => {
            let _ = write!(
                h,
                r#" <span class="session" title="session id: {id}">session <span class="client">{c}</span> <small class="session-id">{id}</small></span>"#,
                c = text(c),
                id = text(&r.session_id),
            );
        }
        None => {
            let _ = write!(h, r#" <span class="session">session {}</span>"#, text(&r.session_id));
        }
    }
    let _ = write!(h, r#" <time class="time" datetime="{iso}">{iso}</time>"#, iso = iso8601(r.at_ms));
    if let Some(reason) = &r.reason {
        let _ = write!(h, r#"<p class="reason">{}</p>"#, text(reason));
    }
    h.push_str("</li>");
    h
}

/// `2026-11-23T04:05:06.789Z` for epoch milliseconds.
pub(crate) fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, (rem % 3600) / 60, rem % 60, ms % 1000)
}

/// The page around the live list: a shell without data (no request, no name, no key). Its
/// script fills it from the event stream, which needs the page key.
pub(crate) fn page(title: &str) -> String {
    format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title><link rel="stylesheet" href="assets/console.css"><script src="assets/console.js" defer></script></head><body><header class="top"><h1>{title}</h1><span id="conn" class="conn">connecting…</span><span class="who">signed in as <b id="approver"></b></span><button type="button" id="notify">Notify me</button><a href="audit">Audit</a><button type="button" id="logout">Sign out</button></header><p id="notice" role="status" hidden></p><section id="sessions" aria-label="sessions waiting"></section><main><h2>Waiting for a decision <span id="pending-count">0</span></h2><p class="help">Keys: <kbd>j</kbd>/<kbd>k</kbd> move, <kbd>a</kbd> approve once, <kbd>s</kbd> approve for the session, <kbd>d</kbd> deny, <kbd>e</kbd> edit, <kbd>Esc</kbd> cancel.</p><ol id="pending"></ol><p id="empty" class="empty">Nothing is waiting.</p>{legend}<h2>Decided</h2><ol id="history"></ol></main></body></html>"#,
        title = html(title),
        legend = RISK_LEGEND,
    )
}

/// What the risk badges mean (the MCP gate's levels, `signoff_mcp::risk`), on the page.
const RISK_LEGEND: &str = r#"<section id="risk-legend" class="legend" aria-labelledby="risk-legend-title"><h3 id="risk-legend-title">Risk</h3><dl><dt><span class="risk risk-l0">L0</span></dt><dd>harmless: only reads (a tool marked read-only)</dd><dt><span class="risk risk-l1">L1</span></dt><dd>low</dd><dt><span class="risk risk-l2">L2</span></dt><dd>changes something, marked not destructive</dd><dt><span class="risk risk-l3">L3</span></dt><dd>destructive (or not marked), in a closed world</dd><dt><span class="risk risk-l4">L4</span></dt><dd>destructive (or not marked), in an open world: the default for a tool without hints</dd><dt><span class="risk risk-l5">L5</span></dt><dd>highest: set only by configuration</dd><dt><span class="risk risk-none">no risk hint</span></dt><dd>the tool says nothing about its risk: not a sign that it is safe</dd></dl><p>A tool under approval shows its risk one band lower, never below L1: approving takes one band of risk away, but a call that waits for you is never shown as riskless (a gated L4 tool shows L3). Hints come from the tool itself and are not checked.</p></section>"#;

pub(crate) fn login_page(title: &str, keys: bool, message: Option<&str>) -> String {
    let mut h = String::with_capacity(2048);
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Sign in · {title}</title><link rel="stylesheet" href="assets/console.css"><script src="assets/login.js" defer></script></head><body class="login"><main><h1>{title}</h1><p id="login-message" role="alert">{msg}</p>"#,
        title = html(title),
        msg = message.map(text).unwrap_or_default(),
    );
    if keys {
        h.push_str(
            r#"<form id="login-form"><label>Approver <input name="approver" autocomplete="username" required></label><label>Key <input name="key" type="password" autocomplete="current-password" required></label><button type="submit" id="login-submit">Sign in</button></form>"#,
        );
    } else {
        h.push_str("<p>Open the sign-in link you were given.</p>");
    }
    h.push_str("</main></body></html>");
    h
}

/// The audit page: a shell; its script fetches the verification with the page key.
pub(crate) fn audit_page(title: &str) -> String {
    format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Audit · {title}</title><link rel="stylesheet" href="assets/console.css"><script src="assets/audit.js" defer></script></head><body><header class="top"><h1>{title}: audit</h1><a href="./">Back to the console</a></header><main><section id="audit"><p>Verifying…</p></section><h2>Records, newest first</h2><p id="records-status" role="status">Reading…</p><table id="audit-records" hidden><thead><tr><th>Time</th><th>Event</th><th>Tool</th><th>Session</th><th>Request</th><th>By</th><th>Decision</th><th>Result</th><th>Reason</th></tr></thead><tbody></tbody></table><button type="button" id="older" hidden>Older records</button></main></body></html>"#,
        title = html(title),
    )
}

/// The result of the call behind an audit record, read from the records around it: `ran`,
/// `failed` or `interrupted` (its `execution` record), `not run` (denied, timed out, cancelled),
/// `no result yet` (approved, no `execution` among the records read), `waiting` (still pending).
pub(crate) fn audit_result(
    r: &AuditRecord,
    around: &[AuditRecord],
    pending: impl Fn(&uuid::Uuid) -> bool,
) -> Option<&'static str> {
    let ran = |decision: Option<&str>| match decision {
        Some("ok") => "ran",
        Some("error") => "failed",
        Some("interrupted") => "interrupted (may or may not have run)",
        _ => "unknown",
    };
    match r.kind {
        AuditKind::Execution => return Some(ran(r.decision.as_deref())),
        AuditKind::Grant | AuditKind::Notice | AuditKind::Bypass => return None,
        _ => {}
    }
    let id = r.request_id?;
    let of = |kind: AuditKind| around.iter().find(|o| o.kind == kind && o.request_id == Some(id));
    if let Some(e) = of(AuditKind::Execution) {
        return Some(ran(e.decision.as_deref()));
    }
    match of(AuditKind::Outcome).and_then(|o| o.decision.as_deref()) {
        Some("approved") => Some("no result yet"),
        Some(_) => Some("not run"),
        None if pending(&id) => Some("waiting"),
        None => None,
    }
}

/// One audit record as a row of the audit page's table.
pub(crate) fn audit_row(r: &AuditRecord, result: Option<&str>, client: Option<&str>) -> String {
    let kind = serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let opt = |v: Option<&str>| v.map(text).unwrap_or_default();
    let mut h = String::with_capacity(512);
    let _ = write!(
        h,
        r#"<tr class="record kind-{kind}" data-kind="{kind}" data-seq="{seq}" data-request="{request}" data-result="{result}"><td class="time"><time datetime="{iso}">{iso}</time></td><td class="kind">{kind}</td><td class="tool">{tool}</td>"#,
        kind = html(&kind),
        seq = r.seq.map(|s| s.to_string()).unwrap_or_default(),
        request = r.request_id.map(|i| i.to_string()).unwrap_or_default(),
        result = html(result.unwrap_or("")),
        iso = iso8601(r.at_ms),
        tool = opt(r.tool.as_deref()),
    );
    match (client, r.session_id.as_deref()) {
        (Some(c), Some(s)) => {
            let _ = write!(
                h,
                r#"<td class="session" title="session id: {s}"><span class="client">{c}</span> <small class="session-id">{s}</small></td>"#,
                c = text(c),
                s = text(s),
            );
        }
        (_, s) => {
            let _ = write!(h, r#"<td class="session">{}</td>"#, opt(s));
        }
    }
    let _ = write!(
        h,
        r#"<td class="request"><code>{request}</code></td><td class="responder">{who}</td><td class="decision">{decision}</td><td class="result">{result}</td><td class="reason">{reason}</td></tr>"#,
        request = r.request_id.map(|i| i.to_string()).unwrap_or_default(),
        who = opt(r.responder.as_deref()),
        decision = opt(r.decision.as_deref()),
        result = html(result.unwrap_or("")),
        reason = opt(r.reason.as_deref()),
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_795_410_306_789), "2026-11-23T05:05:06.789Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn markup_and_invisible_code_points_are_escaped() {
        assert_eq!(html(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        let shown = text("report\u{FE0F}.txt<script>");
        assert!(!shown.contains('\u{FE0F}') && !shown.contains('<'), "{shown}");
    }
}
