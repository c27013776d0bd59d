"""The approval console in a real browser (headless Chromium), against a real gate: a Python agent
whose gated calls wait in threads while a person decides in the page.

Each test signs in with a sign-in link, as a person would, and checks what the agent's call got.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import http.server
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import signoff
from playwright.sync_api import BrowserContext, Page, expect

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "mode": {"type": "integer", "minimum": 0}},
    "required": ["path"],
    "additionalProperties": False,
}


class Agent:
    """A gate with one editable, gated tool, a console, and calls running in threads."""

    def __init__(self, tmp: Path, timeout: float = 30.0, console: Optional[Dict[str, Any]] = None) -> None:
        self.runs: List[Dict[str, Any]] = []
        self.gate = signoff.Gate(
            token_keys=signoff.TokenKeys("k1", signoff.Secret.generate()),
            default_timeout=timeout,
            audit_path=str(tmp / "audit.jsonl"),
        )
        self.gate.register(
            "write_file",
            description="Writes a file on the agent's host",
            parameters=SCHEMA,
            approval="required",
            editable=True,
            destructive=True,
            executor=self._run,
        )
        self.console = self.gate.serve_console(title="signoff test console", **(console or {}))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=16)

    def _run(self, args: Dict[str, Any]) -> str:
        self.runs.append(args)
        return f"wrote {args['path']}"

    def call(self, path: str, session: str = "agent-1", **extra: Any) -> "concurrent.futures.Future[signoff.ToolResult]":
        before = {r.id for r in self.gate.pending()}
        future = self.pool.submit(self.gate.execute_blocking, "write_file", {"path": path, **extra}, session_id=session)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(r.id not in before for r in self.gate.pending()) or future.done():
                return future
            time.sleep(0.005)
        raise AssertionError("the call never became pending")

    def pending_ids(self) -> List[str]:
        return [str(r.id) for r in self.gate.pending()]

    def close(self) -> None:
        self.console.close()
        self.gate.close()
        self.pool.shutdown(wait=True)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path)
    yield a
    a.close()


def sign_in(page: Page, agent: Agent, approver: str = "alice") -> None:
    link = agent.console.sign_in_link(approver)
    page.goto(link)
    page.wait_for_url(agent.console.url)
    expect(page.locator("#approver")).to_have_text(approver)
    expect(page.locator("#conn")).to_have_text("live")
    assert "token" not in page.url, "the sign-in token is gone from the address bar"


def card(page: Page, request_id: str) -> Any:
    return page.locator(f'li.request[data-id="{request_id}"]')


def ask(
    page: Page, agent: Agent, path: str, **kw: Any
) -> "tuple[concurrent.futures.Future[signoff.ToolResult], str, Any]":
    """Starts a call; returns it with its request id and its card in the page (once shown)."""
    call = agent.call(path, **kw)
    (rid,) = agent.pending_ids()
    c = card(page, rid)
    expect(c).to_be_attached()
    return call, rid, c


def result(future: "concurrent.futures.Future[signoff.ToolResult]") -> signoff.ToolResult:
    return future.result(timeout=10)


def test_approve_once_runs_the_tool_and_nothing_is_focused_by_default(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    call, rid, c = ask(page, agent, "/tmp/report.txt")
    expect(c).to_be_visible()
    expect(c.locator(".tool")).to_have_text("write_file")
    expect(c.locator(".description")).to_have_text("Writes a file on the agent's host")
    expect(c.locator(".risk")).to_have_text("destructive")
    expect(c.locator(".session")).to_have_text("agent-1")
    expect(c.locator("pre.arguments")).to_contain_text('"path": "/tmp/report.txt"')
    expect(c.locator(".countdown")).to_have_text(re.compile(r"\d+:\d\d left"))
    expect(page.locator('#sessions .badge[data-session="agent-1"]')).to_have_text("agent-1: 1 waiting")
    # No default focus on Approve (a stray Enter must not approve).
    assert page.evaluate("document.activeElement === document.body")
    page.keyboard.press("Enter")
    assert agent.pending_ids() == [rid]

    expect(c.locator('button[data-action="approve"]')).to_have_text("Approve once")
    c.locator('button[data-action="approve"]').click()
    r = result(call)
    assert (r.status, agent.runs) == ("executed", [{"path": "/tmp/report.txt"}])
    expect(c).to_have_count(0)
    row = page.locator(f'#history li[data-id="{rid}"]')
    expect(row.locator(".outcome")).to_have_text("approved")
    expect(row.locator(".responder")).to_have_text("alice")
    expect(page.locator("#empty")).to_be_visible()


def test_deny_needs_a_reason_and_the_model_gets_it(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    call, rid, c = ask(page, agent, "/etc/passwd")
    c.locator('button[data-action="deny"]').click()
    confirm = c.locator('button[data-action="confirm-deny"]')
    expect(confirm).to_be_disabled()
    expect(c.locator(".deny-reason")).to_be_focused()
    c.locator(".deny-reason").fill("   ")
    expect(confirm).to_be_disabled()
    c.locator(".deny-reason").fill("not outside /tmp")
    confirm.click()
    r = result(call)
    assert r.status == "denied" and "not outside /tmp" in r.content, r.content
    assert agent.runs == []
    row = page.locator(f'#history li[data-id="{rid}"]')
    expect(row.locator(".outcome")).to_have_text("denied")
    expect(row.locator(".reason")).to_have_text("not outside /tmp")


def test_edit_with_a_schema_error_then_a_valid_edit_runs_the_edit(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    call, rid, c = ask(page, agent, "/tmp/draft.txt")
    c.locator('button[data-action="edit"]').click()
    editor = c.locator(".editor")
    expect(editor).to_be_focused()
    submit = c.locator('button[data-action="submit-edit"]')
    expect(submit).to_be_disabled()
    # Not JSON, then JSON the schema refuses: nothing can be submitted.
    editor.fill('{"path": ')
    c.locator('button[data-action="check-edit"]').click()
    expect(c.locator(".edit-errors")).to_contain_text("Not valid JSON")
    editor.fill('{"path": "/tmp/final.txt", "mode": -1}')
    c.locator('button[data-action="check-edit"]').click()
    expect(c.locator(".edit-errors")).to_contain_text("mode")
    expect(submit).to_be_disabled()
    # A valid edit: the diff shows exactly what changed.
    editor.fill('{"path": "/tmp/final.txt", "mode": 420}')
    c.locator('button[data-action="check-edit"]').click()
    expect(c.locator(".diff li")).to_have_count(2)
    expect(c.locator(".diff li").nth(0)).to_have_text('/mode 420')
    expect(c.locator(".diff li").nth(1)).to_have_text('/path "/tmp/draft.txt" "/tmp/final.txt"')
    expect(submit).to_be_enabled()
    # Typing again voids the check.
    editor.press("End")
    editor.type(" ")
    expect(submit).to_be_disabled()
    c.locator('button[data-action="check-edit"]').click()
    expect(submit).to_be_enabled()
    submit.click()
    r = result(call)
    assert r.status == "executed" and r.edited
    assert agent.runs == [{"path": "/tmp/final.txt", "mode": 420}]
    expect(page.locator(f'#history li[data-id="{rid}"] .edited')).to_have_text("with edited arguments")


def test_approve_for_the_session_says_which_scope_and_grants_it(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    call = agent.call("/tmp/a", session="agent-7")
    (rid,) = agent.pending_ids()
    button = card(page, rid).locator('button[data-action="session"]')
    expect(button).to_have_text("Approve for session agent-7")
    button.click()
    assert result(call).status == "executed"
    expect(page.locator(f'#history li[data-id="{rid}"] .scope')).to_have_text("for the session")
    assert agent.gate.grants("agent-7") == ["write_file"]
    # The next call in that session runs without asking; another session still asks.
    # (Playwright's sync API runs an event loop on this thread: blocking calls go to the pool.)
    again = agent.pool.submit(agent.gate.execute_blocking, "write_file", {"path": "/tmp/b"}, session_id="agent-7")
    assert result(again).status == "executed"
    other = agent.call("/tmp/c", session="agent-8")
    expect(page.locator("li.request")).to_have_count(1)
    agent.gate.cancel_request(agent.pending_ids()[0])
    assert result(other).status == "cancelled"


def test_an_expired_request_cannot_be_approved_and_shows_as_timed_out(page: Page, tmp_path: Path) -> None:
    agent = Agent(tmp_path, timeout=3)
    try:
        sign_in(page, agent)
        call, rid, c = ask(page, agent, "/tmp/late")
        expect(c.locator('button[data-action="approve"]')).to_be_enabled()
        # The page's clock reaches the deadline before the gate's timeout lands (a slow link, a
        # clock a little ahead): everything but Cancel is disabled at once.
        page.evaluate(
            """id => { document.querySelector(`li.request[data-id="${id}"]`).dataset.deadline =
                       String(Date.now() + Number(document.body.dataset.clockOffset) - 1); }""",
            rid,
        )
        expect(c).to_have_class(re.compile(r"\bexpired\b"))
        for action in ("approve", "session", "deny"):
            expect(c.locator(f'button[data-action="{action}"]')).to_be_disabled()
        expect(c.locator(".countdown")).to_have_text("expired")
        expect(c.locator(".status")).to_contain_text("timed out, not denied")
        # The gate's own deadline then ends it as a timeout, shown as one.
        r = result(call)
        assert r.status == "timed-out" and agent.runs == []
        row = page.locator(f'#history li[data-id="{rid}"]')
        expect(row.locator(".outcome")).to_have_text("timed out")
        assert "denied" not in row.inner_text()
    finally:
        agent.close()


def test_clicking_approve_as_the_request_expires_runs_at_most_once(page: Page, tmp_path: Path) -> None:
    agent = Agent(tmp_path, timeout=1.0)
    try:
        sign_in(page, agent)
        outcomes = []
        for i, lead_ms in enumerate([60, 20, 0, -20]):
            call = agent.call(f"/tmp/edge{i}")
            (rid,) = agent.pending_ids()
            deadline = int(card(page, rid).get_attribute("data-deadline"))
            # Click Approve `lead_ms` before the deadline (by the server's clock), bypassing the page's
            # own disabling, as a person clicking at the last moment would race it.
            page.evaluate(
                """([id, deadline, lead]) => {
                    const offset = Number(document.body.dataset.clockOffset);
                    const b = document.querySelector(`li.request[data-id="${id}"] button[data-action="approve"]`);
                    setTimeout(() => { b.disabled = false; b.click(); }, deadline - lead - (Date.now() + offset));
                }""",
                [rid, deadline, lead_ms],
            )
            r = result(call)
            outcomes.append(r.status)
            expected_runs = sum(1 for o in outcomes if o == "executed")
            assert r.status in ("executed", "timed-out"), r.status
            assert len(agent.runs) == expected_runs
            shown = "approved" if r.status == "executed" else "timed out"
            expect(page.locator(f'#history li[data-id="{rid}"] .outcome')).to_have_text(shown)
        assert outcomes[-1] == "timed-out", outcomes
    finally:
        agent.close()


def test_pending_requests_survive_a_reload_and_a_dropped_connection_resyncs(
    context: BrowserContext, agent: Agent, tcp_proxy: Callable[[int], Any]
) -> None:
    proxy = tcp_proxy(int(agent.console.url.rsplit(":", 1)[1].strip("/")))
    page = context.new_page()
    link = agent.console.sign_in_link("alice")
    page.goto(proxy.url("/login#token=" + link.split("#token=", 1)[1]))
    page.wait_for_url(proxy.url("/"))
    first = agent.call("/tmp/one")
    (r1,) = agent.pending_ids()
    expect(card(page, r1)).to_be_visible()
    page.reload()
    expect(card(page, r1)).to_be_visible()
    expect(page.locator("#conn")).to_have_text("live")

    # The connection drops; meanwhile a request arrives and another is decided elsewhere.
    context.set_offline(True)
    proxy.drop()
    expect(page.locator("#conn")).to_have_text("reconnecting…")
    second = agent.call("/tmp/two", session="agent-2")
    r2 = next(i for i in agent.pending_ids() if i != r1)
    agent.gate.respond(r1, "approve", responder="bob")
    assert result(first).status == "executed"
    with page.expect_request(lambda r: r.url.endswith("/events")) as reconnect:
        context.set_offline(False)
    assert reconnect.value.header_value("Last-Event-ID"), "the browser resumed from the last event it saw"
    expect(page.locator("#conn")).to_have_text("live")
    expect(card(page, r2)).to_be_visible()
    expect(card(page, r1)).to_have_count(0)
    expect(page.locator(f'#history li[data-id="{r1}"] .responder')).to_have_text("bob")
    agent.gate.cancel_request(r2)
    result(second)


def test_two_approvers_racing_exactly_one_wins_and_the_other_sees_who(
    new_context: Callable[..., BrowserContext], agent: Agent
) -> None:
    pages = []
    for who in ("alice", "bob"):
        p = new_context().new_page()
        sign_in(p, agent, who)
        pages.append(p)
    # Both pages click at the same instant. On a loaded machine one page's timer can fire after the
    # other's approval already reached it through the feed; its card is gone by then and its click
    # lands nowhere (as a person's would). Such a round still proves one execution, but the loser's
    # notice is checked only in rounds where both clicks hit a live card; at least one must.
    raced = 0
    for round_ in range(8):
        call = agent.call(f"/tmp/race{round_}")
        (rid,) = agent.pending_ids()
        for p in pages:
            expect(card(p, rid)).to_be_visible()
        at = int(time.time() * 1000) + 300
        for p in pages:
            p.evaluate(
                """([id, at]) => {
                    const n = document.querySelector('#notice');
                    n.textContent = ''; n.hidden = true;
                    window.__live = null;
                    const b = document.querySelector(`li.request[data-id="${id}"] button[data-action="approve"]`);
                    setTimeout(() => { window.__live = b.isConnected; b.click(); }, at - Date.now());
                }""",
                [rid, at],
            )
        r = result(call)
        assert r.status == "executed"
        assert len(agent.runs) == round_ + 1, "exactly one execution"
        assert r.decision is not None and r.decision.responder is not None
        winner = r.decision.responder
        for p in pages:
            expect(p.locator(f'#history li[data-id="{rid}"] .responder')).to_have_text(winner)
        loser = pages[1] if winner == "alice" else pages[0]
        loser.wait_for_function("window.__live !== null")
        if all(p.evaluate("window.__live") for p in pages):
            raced += 1
            expect(loser.locator("#notice")).to_contain_text(f"already decided by {winner}: approved")
        if raced >= 3:
            break
    assert raced >= 1, "no round had both clicks land on a live card"


def test_keyboard_only(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    a = agent.call("/tmp/k1")
    time.sleep(0.005)  # distinct creation times: the page lists oldest first
    b = agent.call("/tmp/k2")
    time.sleep(0.005)
    c = agent.call("/tmp/k3")
    ids = agent.pending_ids()
    expect(page.locator("li.request")).to_have_count(3)
    expect(page.locator("li.request.selected")).to_have_attribute("data-id", ids[0])
    page.keyboard.press("j")
    expect(page.locator("li.request.selected")).to_have_attribute("data-id", ids[1])
    page.keyboard.press("a")  # approve the second
    assert result(b).status == "executed"
    expect(page.locator("li.request")).to_have_count(2)
    page.keyboard.press("k")
    expect(page.locator("li.request.selected")).to_have_attribute("data-id", ids[0])
    page.keyboard.press("d")  # deny the first: the reason box has focus
    page.keyboard.type("keyboard says no")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    r = result(a)
    assert r.status == "denied" and "keyboard says no" in r.content
    expect(page.locator("li.request.selected")).to_have_attribute("data-id", ids[2])
    page.keyboard.press("e")  # edit the third
    page.keyboard.press("Control+a")
    page.keyboard.type('{"path": "/tmp/k3-edited"}')
    page.keyboard.press("Escape")  # leaves the editor; the box closes
    expect(page.locator(f'li.request[data-id="{ids[2]}"] .edit-box')).to_be_hidden()
    page.keyboard.press("s")  # approve for the session
    assert result(c).status == "executed"
    assert agent.runs == [{"path": "/tmp/k2"}, {"path": "/tmp/k3"}]


def test_a_key_does_not_approve_a_card_the_page_selected_itself_just_now(page: Page, agent: Agent) -> None:
    # The first card to arrive is selected by the page; a key pressed within a second of that
    # was meant for what was there before (or nothing): it chooses the card, a second press
    # approves it. A single `a` used to approve a request on screen for a few milliseconds.
    sign_in(page, agent)
    first = agent.call("/tmp/just-arrived")
    expect(page.locator("li.request.selected")).to_have_count(1)
    page.keyboard.press("a")
    expect(page.locator("#notice")).to_contain_text("press again to approve it")
    assert len(agent.pending_ids()) == 1 and agent.runs == []
    page.keyboard.press("a")
    assert result(first).status == "executed"
    assert agent.runs == [{"path": "/tmp/just-arrived"}]


class _Site(http.server.BaseHTTPRequestHandler):
    """Another site or local server the person opens: serves one page, logs nothing."""

    def send_page(self, page: str) -> None:
        data = page.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class _Evil(_Site):
    target = ""
    body = ""

    def do_GET(self) -> None:  # noqa: N802
        self.send_page(
            f"""<!doctype html><form id="f" method="post" action="{self.target}api/decide" enctype="text/plain">
        <input name='{self.body[:-2]}' value='"}}'></form>"""
        )


@pytest.mark.allow_page_errors
def test_unauthenticated_and_cross_site_requests_are_refused(
    new_context: Callable[..., BrowserContext], agent: Agent
) -> None:
    call = agent.call("/tmp/target")
    (rid,) = agent.pending_ids()
    request = agent.gate.pending()[0]
    # Not signed in: the console shows the sign-in page, and the API refuses.
    stranger = new_context().new_page()
    stranger.goto(agent.console.url)
    assert stranger.url.endswith("/login")
    assert stranger.request.post(agent.console.url + "api/decide", data={"id": rid}).status == 401
    # Signed in, then lured to another site that posts a decision to the console.
    victim = new_context().new_page()
    sign_in(victim, agent)
    body = json.dumps({"id": rid, "digest": request.arguments_digest, "decision": "approve", "x": ""})
    _Evil.target, _Evil.body = agent.console.url, body
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with victim.expect_response(lambda r: "api/decide" in r.url) as posted:
            victim.goto(f"http://localhost:{evil.server_address[1]}/")
            victim.evaluate("document.getElementById('f').submit()")
        assert posted.value.status in (401, 403)
    finally:
        evil.shutdown()
    assert agent.pending_ids() == [rid], "nothing was decided"
    agent.gate.cancel_request(rid)
    assert result(call).status == "cancelled" and agent.runs == []


def test_a_notification_when_a_request_arrives_in_a_hidden_tab(
    page: Page, agent: Agent, notifications: Any, set_visibility: Callable[[Page, str], None]
) -> None:
    sign_in(page, agent)
    expect(page.locator("#notify")).to_be_hidden()  # permission already granted
    set_visibility(page, "hidden")
    call = agent.call("/tmp/n", session="night-shift")
    (rid,) = agent.pending_ids()
    expect(card(page, rid)).to_be_attached()
    page.wait_for_function("(window.__signoffNotifications || []).length > 0")
    (shown,) = notifications.shown(page)
    assert shown["title"] == "Approval needed: write_file" and shown["hidden"] is True
    assert shown["options"]["body"] == "session night-shift"
    set_visibility(page, "visible")
    agent.call("/tmp/n2")
    expect(page.locator("li.request")).to_have_count(2)
    assert len(notifications.shown(page)) == 1, "no notification while the tab is visible"
    for i in agent.pending_ids():
        agent.gate.cancel_request(i)
    result(call)


def test_what_is_shown_hides_nothing(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    sneaky = "/data/report.txt\u202e\ufe0f\U000e0041<img src=x onerror=alert(1)>"
    call, rid, c = ask(page, agent, sneaky, session="ops\u200b-agent")
    pre = c.locator("pre.arguments")
    for visible in ("\\u{202E}", "\\u{FE0F}", "\\u{E0041}", "<img src=x onerror=alert(1)>"):
        expect(pre).to_contain_text(visible)
    shown = pre.text_content() or ""
    for invisible in ("\u202e", "\ufe0f", "\U000e0041"):
        assert invisible not in shown
    assert c.locator("img").count() == 0, "markup in arguments is text, not HTML"
    # The session too, wherever it is shown: the card, its scope button, the waiting badge.
    expect(c.locator(".session")).to_have_text("ops\\u{200B}-agent")
    expect(c.locator('button[data-action="session"]')).to_have_text("Approve for session ops\\u{200B}-agent")
    expect(page.locator("#sessions .badge")).to_have_text("ops\\u{200B}-agent: 1 waiting")
    agent.gate.cancel_request(rid)
    result(call)


def test_the_audit_view_verifies_the_chain(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    call = agent.call("/tmp/audited")
    (rid,) = agent.pending_ids()
    card(page, rid).locator('button[data-action="approve"]').click()
    result(call)
    page.click("text=Audit")
    expect(page.locator("#audit-result")).to_have_attribute("data-ok", "true")
    expect(page.locator("#audit-result")).to_contain_text("hash chain intact")


def call_with(
    agent: Agent, tool: str, path: str, session: str, metadata: Optional[Dict[str, Any]] = None
) -> "tuple[concurrent.futures.Future[signoff.ToolResult], str]":
    """Starts a call of `tool` with request metadata (as the MCP gate sets it); returns it with its request id."""
    before = set(agent.pending_ids())
    future = agent.pool.submit(agent.gate.execute_blocking, tool, {"path": path}, session_id=session, metadata=metadata)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        new = [i for i in agent.pending_ids() if i not in before]
        if new:
            return future, new[0]
        time.sleep(0.005)
    raise AssertionError("the call never became pending")


RED_BADGE = "rgb(253, 232, 231)"  # .risk-destructive, .risk-l4


def test_a_request_without_risk_hints_has_a_neutral_badge_and_a_legend_explains_the_levels(
    page: Page, agent: Agent
) -> None:
    agent.gate.register(
        "note",
        description="Adds a note",
        parameters=SCHEMA,
        approval="required",
        executor=lambda args: "noted",
    )
    sign_in(page, agent)
    hintless, plain_id = call_with(agent, "note", "/tmp/n", "agent-1")
    plain = card(page, plain_id).locator(".risk")
    expect(plain).to_have_text("no risk hint")
    expect(plain).to_have_attribute("data-risk", "none")
    expect(plain).not_to_have_css("background-color", RED_BADGE)
    expect(plain).to_have_css("background-color", "rgb(236, 238, 241)")
    destructive, rid = call_with(agent, "write_file", "/tmp/w", "agent-1")
    expect(card(page, rid).locator(".risk")).to_have_attribute("data-risk", "destructive")
    expect(card(page, rid).locator(".risk")).to_have_css("background-color", RED_BADGE)
    legend = page.locator("#risk-legend")
    expect(legend).to_be_visible()
    for level in ("L0", "L1", "L2", "L3", "L4", "L5"):
        expect(legend.locator("dt .risk", has_text=level)).to_be_visible()
    expect(legend).to_contain_text("harmless")
    expect(legend).to_contain_text("highest")
    expect(legend).to_contain_text("one band lower, never below L1")
    expect(legend.locator(".risk-none")).to_have_text("no risk hint")
    for i in (plain_id, rid):
        agent.gate.cancel_request(i)
    result(hintless)
    result(destructive)


def test_an_mcp_session_is_labelled_by_its_clients_name_with_its_id_beside_it(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    session = "mcp-0e5c1a2b-1111-4222-8333-444455556666"
    call, rid = call_with(agent, "write_file", "/tmp/m", session, {"risk": "L3", "client": "claude-code 1.2.3 <i>"})
    c = card(page, rid)
    expect(c.locator(".session .client")).to_have_text("claude-code 1.2.3 <i>")  # as text: escaped, not markup
    expect(c.locator(".session i")).to_have_count(0)
    expect(c.locator(".session .session-id")).to_have_text(session)
    expect(c.locator(".session")).to_have_attribute("title", f"session id: {session}")
    expect(c.locator(".risk")).to_have_text("L3")
    expect(c.locator(".risk")).to_have_attribute("data-risk", "l3")
    expect(c.locator('button[data-action="session"]')).to_have_text(
        "Approve for session claude-code 1.2.3 <i> · mcp-0e5c1a2b…"
    )
    badge = page.locator("#sessions .badge")
    expect(badge).to_have_text("claude-code 1.2.3 <i> · mcp-0e5c1a2b…: 1 waiting")
    expect(badge).to_have_attribute("title", f"session id: {session}")
    c.locator('button[data-action="approve"]').click()
    assert result(call).status == "executed"
    row = page.locator(f'#history li[data-id="{rid}"]')
    expect(row.locator(".client")).to_have_text("claude-code 1.2.3 <i>")
    expect(row.locator(".session-id")).to_have_text(session)


def test_the_audit_page_lists_who_approved_and_denied_and_whether_the_tool_ran(
    page: Page, agent: Agent, new_context: Callable[..., BrowserContext]
) -> None:
    sign_in(page, agent, "alice")
    bob = new_context().new_page()
    sign_in(bob, agent, "bob")
    approved, a, c = ask(page, agent, "/tmp/approved")
    c.locator('button[data-action="approve"]').click()
    assert result(approved).status == "executed"
    denied, d, _ = ask(page, agent, "/tmp/denied")
    c = card(bob, d)
    c.locator('button[data-action="deny"]').click()
    c.locator(".deny-reason").fill("not <that> file")
    c.locator('button[data-action="confirm-deny"]').click()
    assert result(denied).status == "denied"
    page.click("text=Audit")
    expect(page.locator("#audit-result")).to_have_attribute("data-ok", "true")
    table = page.locator("#audit-records")
    expect(table).to_be_visible()
    for col in ("Time", "Event", "Tool", "Request", "By", "Decision", "Result", "Reason"):
        expect(table.locator("thead th", has_text=col)).to_have_count(1)
    outcome = table.locator(f'tr[data-kind="outcome"][data-request="{a}"]')
    expect(outcome.locator(".responder")).to_have_text("alice")
    expect(outcome.locator(".decision")).to_have_text("approved")
    expect(outcome.locator(".result")).to_have_text("ran")
    expect(outcome.locator(".tool")).to_have_text("write_file")
    expect(outcome.locator(".request")).to_have_text(a)
    expect(table.locator(f'tr[data-kind="execution"][data-request="{a}"] .result')).to_have_text("ran")
    outcome = table.locator(f'tr[data-kind="outcome"][data-request="{d}"]')
    expect(outcome.locator(".responder")).to_have_text("bob")
    expect(outcome.locator(".decision")).to_have_text("denied")
    expect(outcome.locator(".result")).to_have_text("not run")
    expect(outcome.locator(".reason")).to_have_text("not <that> file")
    expect(table.locator(f'tr[data-kind="execution"][data-request="{d}"]')).to_have_count(0)
    # Newest first: the denial was decided after the approval.
    kinds = table.locator("tbody tr").evaluate_all("rows => rows.map(r => [r.dataset.kind, r.dataset.request])")
    assert kinds.index(["outcome", d]) < kinds.index(["outcome", a]), kinds
    expect(page.locator("#older")).to_be_hidden()
    expect(page.locator("#records-status")).to_contain_text(f"{len(kinds)} records")


def test_screenshot_for_the_readme(page: Page, agent: Agent, tmp_path: Path) -> None:
    """Renders the console with a few requests; the README's picture is this file."""
    sign_in(page, agent)
    calls = [agent.call("/srv/reports/q3.pdf", session="finance-bot"),
             agent.call("/etc/nginx/nginx.conf", session="ops-agent", mode=420)]
    expect(page.locator("li.request")).to_have_count(2)
    page.set_viewport_size({"width": 1100, "height": 900})
    # SIGNOFF_UPDATE_SCREENSHOT=1 refreshes the README's picture; otherwise it goes to a temporary file.
    if os.environ.get("SIGNOFF_UPDATE_SCREENSHOT") == "1":
        out = Path(__file__).resolve().parents[1] / "console.png"
    else:
        out = tmp_path / "console.png"
    page.screenshot(path=str(out), full_page=False)
    assert out.stat().st_size > 10_000
    for i in agent.pending_ids():
        agent.gate.cancel_request(i)
    for c in calls:
        result(c)


def test_a_link_to_one_request_survives_sign_in_and_selects_it(page: Page, tmp_path: Path) -> None:
    """What an MCP client's URL-mode elicitation opens: `<console>/#request-<id>`. A signed-out
    person is sent to sign in; the link survives it and the request is selected, ready to decide."""
    agent = Agent(tmp_path, console={"approver_keys": {"alice": "alice-key-0123456789"}})
    try:
        first = agent.call("/tmp/first")
        time.sleep(0.005)  # distinct creation times: the page lists oldest first
        second = agent.call("/tmp/second")
        ids = agent.pending_ids()
        page.goto(f"{agent.console.url}#request-{ids[1]}")
        page.wait_for_url(re.compile(r"/login#request-"))
        page.fill('input[name="approver"]', "alice")
        page.fill('input[name="key"]', "alice-key-0123456789")
        page.click("#login-submit")
        page.wait_for_url(re.compile(rf"/#request-{ids[1]}$"))
        expect(page.locator("li.request.selected")).to_have_attribute("data-id", ids[1])
        page.keyboard.press("a")
        assert result(second).status == "executed"
        assert agent.runs == [{"path": "/tmp/second"}]
        # Without a link, the oldest is selected, as always: by the page, so a key pressed at once
        # chooses it, and the next approves it.
        page.goto(agent.console.url)
        expect(page.locator("li.request.selected")).to_have_attribute("data-id", ids[0])
        page.keyboard.press("a")
        expect(page.locator("#notice")).to_contain_text("press again to approve it")
        page.keyboard.press("a")
        assert result(first).status == "executed"
    finally:
        agent.close()


class _Preview(_Site):
    """Another local server the person opens (an agent's dev-server preview): the browser sends
    it every cookie of the host, the console's included, whatever the port."""

    cookies: List[str] = []

    def do_GET(self) -> None:  # noqa: N802
        _Preview.cookies.append(self.headers.get("Cookie") or "")
        self.send_page("<!doctype html><p>preview</p>")


def test_another_local_server_gets_the_cookie_but_cannot_read_or_approve(page: Page, agent: Agent) -> None:
    sign_in(page, agent)
    call, rid, _ = ask(page, agent, "/tmp/secret-plans")
    request = agent.gate.pending()[0]
    preview = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Preview)
    threading.Thread(target=preview.serve_forever, daemon=True).start()
    _Preview.cookies = []
    try:
        page.goto(f"http://127.0.0.1:{preview.server_address[1]}/")
    finally:
        preview.shutdown()
    # The page, and maybe its favicon: each carries the console's cookie.
    cookie = _Preview.cookies[0]
    assert "signoff_console_" in cookie, "browsers send the console's cookie to other ports"
    # What that server can do with it (a script, no browser): nothing.
    host, port = agent.console.address
    status, _, page_text = http_call(host, port, "GET", "/", {"Cookie": cookie})
    assert status == 200 and "secret-plans" not in page_text and rid not in page_text
    for path in ("/events", "/api/audit"):
        assert http_call(host, port, "GET", path, {"Cookie": cookie})[0] == 401, path
    body = json.dumps({"id": rid, "digest": request.arguments_digest, "decision": "approve"})
    assert http_call(host, port, "POST", "/api/decide", {"Cookie": cookie}, body)[0] == 401
    assert agent.pending_ids() == [rid], "nothing was decided"
    agent.gate.cancel_request(rid)
    assert result(call).status == "cancelled" and agent.runs == []


def http_call(host: str, port: int, method: str, path: str, headers: Dict[str, str], body: str = "") -> Any:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        h = dict(headers, **({"Content-Type": "application/json"} if body else {}))
        conn.request(method, path, body=body.encode() if body else None, headers=h)
        res = conn.getresponse()
        return res.status, dict(res.getheaders()), res.read().decode()
    finally:
        conn.close()


def test_signing_in_again_in_another_tab_leaves_both_tabs_working(
    new_context: Callable[..., BrowserContext], agent: Agent
) -> None:
    ctx = new_context()
    first = ctx.new_page()
    sign_in(first, agent)
    # The same browser signs in again in another tab: the cookie and the stored key are replaced.
    second = ctx.new_page()
    sign_in(second, agent, "bob")
    call, rid, c = ask(first, agent, "/tmp/two-tabs")
    c.locator('button[data-action="approve"]').click()
    # The first tab's key is stale: it takes the new one (reloads) instead of signing out.
    expect(first.locator("#approver")).to_have_text("bob")
    assert not first.url.endswith("/login")
    card(first, rid).locator('button[data-action="approve"]').click()
    assert result(call).status == "executed"
    expect(second.locator(f'#history li[data-id="{rid}"] .responder')).to_have_text("bob")
