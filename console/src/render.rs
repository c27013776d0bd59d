//! Server-side HTML: every string a request carries is escaped here, once, so the browser only
//! ever inserts markup this module wrote. Text comes through the core's display escaping first
//! (invisible and deceptive code points become visible `\u{...}` escapes), then HTML escaping.

use serde_json::Value;
use signoff::display::escape_for_display;
use signoff::{ConfirmationRequest, ConfirmationResolved, Gate, Outcome, Scope};
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

/// The risk shown for a request: `metadata.risk` when the caller set one (the MCP gate sets
/// `L0`..`L5`), else what the tool's hints say.
fn risk(gate: &Gate, request: &ConfirmationRequest) -> String {
    match request.metadata.get("risk") {
        Some(Value::String(s)) => return s.clone(),
        Some(Value::Number(n)) => return n.to_string(),
        _ => {}
    }
    match gate.tool_spec(&request.tool) {
        Some(spec) if spec.destructive => "destructive".into(),
        Some(spec) if spec.read_only => "read-only".into(),
        Some(_) => "not marked destructive".into(),
        None => "unknown (tool registered in another process)".into(),
    }
}

/// One pending request as a card. Everything a decision depends on is in the card's data
/// attributes (id, digest, deadline, session), and the editor holds the arguments as JSON.
pub(crate) fn card(gate: &Gate, r: &ConfirmationRequest) -> String {
    let mut h = String::with_capacity(1024 + r.arguments.json().len() * 2);
    let session = text(&r.session_id);
    let _ = write!(
        h,
        r#"<li class="request" data-id="{id}" data-digest="{digest}" data-session="{session_attr}" data-session-shown="{session}" data-deadline="{deadline}" data-created="{created}" data-editable="{editable}">"#,
        id = r.id,
        digest = html(&r.arguments_digest.to_string()),
        session_attr = html(&r.session_id),
        deadline = r.deadline_ms,
        created = r.created_at_ms,
        editable = r.editable,
    );
    let _ = write!(
        h,
        r#"<header><span class="tool">{tool}</span> <span class="risk" title="risk">{risk}</span> <span class="countdown" aria-live="off"></span></header>"#,
        tool = text(&r.tool),
        risk = text(&risk(gate, r)),
    );
    let _ = write!(h, r#"<p class="description">{}</p>"#, text(&r.description));
    h.push_str(r#"<dl class="meta"><dt>session</dt><dd class="session">"#);
    h.push_str(&session);
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
    let session_label = if r.session_id.chars().count() > 40 {
        format!("{}…", r.session_id.chars().take(40).collect::<String>())
    } else {
        r.session_id.to_string()
    };
    let _ = write!(
        h,
        r#"<div class="actions"><button type="button" data-action="approve" title="scope: once">Approve once</button> <button type="button" data-action="session" title="scope: session">Approve for session {label}</button> <button type="button" data-action="deny">Deny…</button>{edit}</div>"#,
        label = text(&session_label),
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

/// One decided request in the history list.
pub(crate) fn history_row(r: &ConfirmationResolved) -> String {
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
    let _ = write!(
        h,
        r#" <span class="session">session {}</span> <time class="time" datetime="{iso}">{iso}</time>"#,
        text(&r.session_id),
        iso = iso8601(r.at_ms)
    );
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
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title><link rel="stylesheet" href="assets/console.css"><script src="assets/console.js" defer></script></head><body><header class="top"><h1>{title}</h1><span id="conn" class="conn">connecting…</span><span class="who">signed in as <b id="approver"></b></span><button type="button" id="notify">Notify me</button><a href="audit">Audit</a><button type="button" id="logout">Sign out</button></header><p id="notice" role="status" hidden></p><section id="sessions" aria-label="sessions waiting"></section><main><h2>Waiting for a decision <span id="pending-count">0</span></h2><p class="help">Keys: <kbd>j</kbd>/<kbd>k</kbd> move, <kbd>a</kbd> approve once, <kbd>s</kbd> approve for the session, <kbd>d</kbd> deny, <kbd>e</kbd> edit, <kbd>Esc</kbd> cancel.</p><ol id="pending"></ol><p id="empty" class="empty">Nothing is waiting.</p><h2>Decided</h2><ol id="history"></ol></main></body></html>"#,
        title = html(title),
    )
}

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
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Audit · {title}</title><link rel="stylesheet" href="assets/console.css"><script src="assets/audit.js" defer></script></head><body><header class="top"><h1>{title}: audit</h1><a href="./">Back to the console</a></header><main id="audit"><p>Verifying…</p></main></body></html>"#,
        title = html(title),
    )
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
