// The shared vectors (tests/vectors/*.json, format in tests/vectors/README.md), read from the
// repository checkout this package lives in. A field this runner does not understand fails.
// bindings-swift/tests-python/test_vectors.py runs the same files over the same C ABI.

import Foundation
import XCTest
import Signoff

private struct VectorError: Error, CustomStringConvertible {
    let description: String
}

private func fail(_ message: String) -> VectorError { VectorError(description: message) }

private let vectorsDir = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent()  // SignoffTests
    .deletingLastPathComponent()  // Tests
    .deletingLastPathComponent()  // bindings-swift
    .deletingLastPathComponent()  // repository root
    .appendingPathComponent("tests/vectors")

private func load(_ name: String) throws -> [String: Any] {
    let url = vectorsDir.appendingPathComponent(name)
    guard FileManager.default.fileExists(atPath: url.path) else {
        throw XCTSkip("shared vectors not found at \(url.path) (the package is not in its repository checkout)")
    }
    guard let object = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any] else {
        throw fail("\(name) is not a JSON object")
    }
    return object
}

private func strict(_ object: [String: Any], _ allowed: Set<String>, _ what: String) throws {
    let unknown = Set(object.keys).subtracting(allowed)
    if !unknown.isEmpty { throw fail("\(what): fields this runner does not understand: \(unknown.sorted())") }
}

private func text(_ value: Any) throws -> String {
    String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed]), as: UTF8.self)
}

private func parse(_ json: String) -> Any {
    (try? JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed])) ?? NSNull()
}

private func outcomeName(_ o: Outcome) -> String {
    switch o {
    case .approved: return "approved"
    case .denied: return "denied"
    case .timedOut: return "timed-out"
    case .cancelled: return "cancelled"
    }
}

private func byName(_ b: ApprovedBy) -> String {
    switch b {
    case .person: return "person"
    case .notGated: return "not-gated"
    case .sessionGrant: return "session-grant"
    case .gatingDisabled: return "gating-disabled"
    }
}

private func statusName(_ s: ToolStatus) -> String {
    switch s {
    case .executed: return "executed"
    case .failed: return "failed"
    case .denied: return "denied"
    case .timedOut: return "timed-out"
    case .cancelled: return "cancelled"
    case .rejected: return "rejected"
    }
}

private func cancelName(_ c: CancelReason) -> String {
    switch c {
    case .noApprover: return "no-approver"
    case .shutdown: return "shutdown"
    case .aborted: return "aborted"
    case .sessionEnded: return "session-ended"
    case .approvalFailed: return "approval-failed"
    }
}

private func orNull(_ value: String?) -> Any {
    if let value { return value }
    return NSNull()
}

/// The typed Decision in the vectors' field names.
private func fields(_ d: Decision) -> [String: Any] {
    switch d {
    case .approved(_, let arguments, let edited, let by, _, let responder):
        return ["outcome": "approved", "by": byName(by), "arguments": parse(arguments), "edited": edited,
                "responder": orNull(responder)]
    case .denied(_, let reason, let responder):
        return ["outcome": "denied", "reason": orNull(reason), "responder": orNull(responder)]
    case .timedOut:
        return ["outcome": "timed-out"]
    case .cancelled(_, let reason):
        return ["outcome": "cancelled", "cancel_reason": cancelName(reason)]
    }
}

private func check(_ actual: [String: Any], _ expected: [String: Any], _ what: String) throws {
    try strict(expected, ["outcome", "by", "arguments", "edited", "reason", "responder", "cancel_reason"], "\(what).decision")
    for (key, value) in expected {
        guard let got = actual[key] else {
            throw fail("\(what): decision \(String(describing: actual["outcome"])) has no field \(key)")
        }
        let gotText = try text(got)
        let expectedText = try text(value)
        if gotText != expectedText { throw fail("\(what): decision.\(key) is \(gotText), expected \(expectedText)") }
    }
}

private func eventType(_ event: GateEvent) throws -> String {
    guard let object = parse(try eventToJson(event: event)) as? [String: Any], let type = object["type"] as? String else {
        throw fail("event without a type")
    }
    return type
}

final class VectorsTests: XCTestCase {
    func testEvents() throws {
        let file = try load("events.json")
        try strict(file, ["events", "description"], "events.json")
        let events = try XCTUnwrap(file["events"] as? [[String: Any]])
        XCTAssertFalse(events.isEmpty)
        for event in events {
            let input = try text(event)
            let typed = try eventFromJson(json: input)
            XCTAssertEqual(try eventType(typed), event["type"] as? String)
            XCTAssertEqual(try text(parse(try eventToJson(event: typed))), input)
        }
    }

    func testMalformedResponses() async throws {
        let file = try load("malformed_responses.json")
        try strict(file, ["cases", "description"], "malformed_responses.json")
        let cases = try XCTUnwrap(file["cases"] as? [[String: Any]])
        for c in cases {
            try strict(c, ["name", "json", "error"], c["name"] as? String ?? "?")
            let name = try XCTUnwrap(c["name"] as? String)
            let body = try XCTUnwrap(c["json"] as? String)
            let expected = try XCTUnwrap(c["error"] as? String)
            let gate = Gate()
            try gate.registerTool(spec: ToolSpec(name: "delete_file"))
            for pendingRequest in [false, true] {
                var handle: PendingConfirmation?
                var sub: Subscription?
                if pendingRequest {
                    sub = gate.subscribe()
                    handle = try gate.confirmCancellable(call: ToolCall(tool: "delete_file"))
                    _ = try await nextRequest(try XCTUnwrap(sub))
                }
                do {
                    _ = try gate.respondJson(json: body)
                    XCTFail("\(name): accepted")
                } catch let error as SignoffError {
                    XCTAssertEqual(error.kindName, expected, name)
                }
                XCTAssertEqual(gate.pendingCount(), pendingRequest ? 1 : 0, name)
                handle?.cancel()
                sub?.close()
            }
        }
    }

    func testFlows() async throws {
        let file = try load("flows.json")
        try strict(file, ["cases", "tools", "description"], "flows.json")
        let cases = try XCTUnwrap(file["cases"] as? [[String: Any]])
        let sharedTools = file["tools"] as? [Any] ?? []
        XCTAssertFalse(cases.isEmpty)
        for c in cases {
            let name = c["name"] as? String ?? "?"
            do {
                try await runFlow(c, sharedTools: sharedTools)
            } catch {
                XCTFail("\(name): \(error)")
            }
        }
    }

    private func runFlow(_ c: [String: Any], sharedTools: [Any]) async throws {
        let name = c["name"] as? String ?? "?"
        try strict(c, ["name", "tools", "gate", "subscribe", "call", "confirm_error", "expect_request", "request", "steps",
                       "decision", "events_after"], name)
        guard let config = gateConfig(c["gate"] as? [String: Any] ?? [:]) else {
            throw fail("\(name): gate options Swift's GateConfig cannot express")
        }
        let gate = try Gate.open(config: config)
        for tool in c["tools"] as? [Any] ?? sharedTools {
            // through the typed ToolSpec record, as an app registers tools
            try gate.registerTool(spec: try toolSpecFromJson(json: try text(tool)))
        }
        let sub: Subscription?
        switch c["subscribe"] ?? true {
        case let mode as String where mode == "observer":
            sub = gate.observe()
        case let flag as Bool:
            sub = flag ? gate.subscribe() : nil
        default:
            throw fail("\(name): subscribe \(String(describing: c["subscribe"]))")
        }
        let callObject = try XCTUnwrap(c["call"] as? [String: Any])
        try strict(callObject, ["tool", "arguments", "session_id", "call_id", "metadata"], "\(name).call")
        let call = ToolCall(
            tool: try XCTUnwrap(callObject["tool"] as? String),
            argumentsJson: try callObject["arguments"].map(text) ?? "{}",
            sessionId: callObject["session_id"] as? String ?? "default",
            callId: callObject["call_id"] as? String,
            metadataJson: try callObject["metadata"].map(text)
        )
        // The Swift way: a task awaiting `confirm`; the `cancel` step cancels the task.
        let task = Task { try await gate.confirm(call) }

        if let expectedError = c["confirm_error"] as? String {
            do {
                _ = try await task.value
                throw fail("\(name): confirm succeeded")
            } catch let error as SignoffError {
                XCTAssertEqual(error.kindName, expectedError, name)
            }
            XCTAssertEqual(gate.pendingCount(), 0, name)
            if let sub {
                let quiet = await noEvent(sub)
                XCTAssertTrue(quiet, "\(name): a refused call published an event")
            }
            return
        }

        let expectRequest = c["expect_request"] as? Bool ?? true
        var request: ConfirmationRequest?
        var requestJson: [String: Any] = [:]
        if expectRequest, let sub {
            guard case .request(let r) = try await nextEvent(sub) else { throw fail("\(name): expected a request") }
            request = r
            requestJson = parse(try eventToJson(event: .request(request: r))) as? [String: Any] ?? [:]
            for (key, value) in c["request"] as? [String: Any] ?? [:] {
                guard let got = requestJson[key] else { throw fail("\(name): request has no field \(key)") }
                XCTAssertEqual(try text(got), try text(value), "\(name): request.\(key)")
            }
        }

        var cancelled = false
        var token: String?
        let steps = c["steps"] as? [[String: Any]] ?? []
        if !steps.isEmpty && request == nil { throw fail("\(name): steps but no request") }
        for (i, step) in steps.enumerated() {
            let what = "\(name): step \(i)"
            let actions = step.keys.filter { $0 != "error" && $0 != "outcome" }
            guard actions.count == 1, let action = actions.first else { throw fail("\(what): one action expected") }
            switch action {
            case "respond":
                var response = try XCTUnwrap(step["respond"] as? [String: Any])
                for key in ["id", "tool", "arguments_digest", "session_id"] where response[key] as? String == "$request" {
                    response[key] = requestJson[key]
                }
                do {
                    let outcome = try gate.respondJson(json: try text(response))
                    XCTAssertEqual(outcomeName(outcome), step["outcome"] as? String, what)
                    XCTAssertNil(step["error"], "\(what): accepted")
                } catch let error as SignoffError {
                    XCTAssertEqual(error.kindName, step["error"] as? String, "\(what): \(error.message)")
                }
            case "wait_past_deadline":
                try strict(step, [action], what)
                let r = try XCTUnwrap(request)
                let now = UInt64(Date().timeIntervalSince1970 * 1000)
                if r.deadlineMs + 50 > now { await pause(ms: r.deadlineMs + 50 - now) }
                await waitUntil { gate.pendingCount() == 0 }
            case "close":
                try strict(step, [action], what)
                gate.close()
            case "unsubscribe":
                try strict(step, [action], what)
                sub?.close()
            case "cancel":
                try strict(step, [action], what)
                task.cancel()
                cancelled = true
                await waitUntil { gate.pendingCount() == 0 }
            case "end_session":
                try strict(step, [action], what)
                _ = gate.endSession(sessionId: try XCTUnwrap(step[action] as? String))
            case "issue_token":
                try strict(step, [action, "error"], what)
                do {
                    let approver = try XCTUnwrap(step[action] as? String)
                    token = try gate.issueToken(requestId: try XCTUnwrap(request).id, approver: approver)
                    XCTAssertNil(step["error"], "\(what): issued")
                } catch let error as SignoffError {
                    XCTAssertEqual(error.kindName, step["error"] as? String, "\(what): \(error.message)")
                }
            case "respond_token":
                try strict(step, [action, "error", "outcome"], what)
                let tr = try XCTUnwrap(step[action] as? [String: Any])
                try strict(tr, ["approver", "decision", "reason", "scope", "arguments"], "\(what).respond_token")
                let decision: ResponseDecision
                switch tr["decision"] as? String {
                case "approve": decision = .approve
                case "deny": decision = .deny
                default: throw fail("\(what): decision \(String(describing: tr["decision"]))")
                }
                let scope: Scope?
                switch tr["scope"] as? String {
                case nil: scope = nil
                case "once": scope = .once
                case "session": scope = .session
                default: throw fail("\(what): scope \(String(describing: tr["scope"]))")
                }
                do {
                    let outcome = try gate.respondToken(
                        token: try XCTUnwrap(token),
                        approver: try XCTUnwrap(tr["approver"] as? String),
                        decision: decision,
                        argumentsJson: try tr["arguments"].map(text),
                        scope: scope,
                        reason: tr["reason"] as? String
                    )
                    XCTAssertEqual(outcomeName(outcome), step["outcome"] as? String, what)
                    XCTAssertNil(step["error"], "\(what): accepted")
                } catch let error as SignoffError {
                    XCTAssertEqual(error.kindName, step["error"] as? String, "\(what): \(error.message)")
                }
            case "tamper_token":
                try strict(step, [action], what)
                var parts = try XCTUnwrap(token).components(separatedBy: ".")
                let replacement = parts[3].first == "A" ? "B" : "A"
                parts[3] = replacement + parts[3].dropFirst()
                token = parts.joined(separator: ".")
            case "rekey_token":
                try strict(step, [action], what)
                var parts = try XCTUnwrap(token).components(separatedBy: ".")
                parts[1] = try XCTUnwrap(step[action] as? String)
                token = parts.joined(separator: ".")
            case "sleep_ms":
                try strict(step, [action], what)
                await pause(ms: try XCTUnwrap(step[action] as? NSNumber).uint64Value)
            default:
                throw fail("\(what): unknown step \(action)")
            }
        }

        let decision = try await task.value
        let expected = try XCTUnwrap(c["decision"] as? [String: Any])
        if !expectRequest {
            guard case .approved(let requestId, _, _, _, _, _) = decision, requestId == nil else {
                throw fail("\(name): a request was made")
            }
            if let sub {
                let quiet = await noEvent(sub)
                XCTAssertTrue(quiet, "\(name): an event was published")
            }
        }
        if cancelled {
            // The cancelled task's own decision says cancelled/aborted; the vector is checked
            // against the resolved event.
            XCTAssertEqual(try text(fields(decision)), try text(["outcome": "cancelled", "cancel_reason": "aborted"]), name)
            let resolved = try await resolvedEvent(try XCTUnwrap(sub), try XCTUnwrap(request).id)
            var actual: [String: Any] = ["outcome": outcomeName(resolved.outcome)]
            if let reason = resolved.cancelReason { actual["cancel_reason"] = cancelName(reason) }
            try check(actual, expected, name)
            return
        }
        try check(fields(decision), expected, name)

        if let expectedEvents = c["events_after"] as? [String] {
            let sub = try XCTUnwrap(sub)
            let events = try await eventsUntilResolved(sub, try XCTUnwrap(request).id)
            XCTAssertEqual(try events.map(eventType), expectedEvents, name)
        }
    }

    // MARK: config.json

    func testConfig() throws {
        let file = try load("config.json")
        try strict(file, ["cases", "description"], "config.json")
        let cases = try XCTUnwrap(file["cases"] as? [[String: Any]])
        XCTAssertFalse(cases.isEmpty)
        for c in cases {
            let name = c["name"] as? String ?? "?"
            try strict(c, ["name", "options", "error", "mentions"], name)
            guard let config = gateConfig(try XCTUnwrap(c["options"] as? [String: Any])) else {
                // Not expressible in Swift (an option GateConfig does not have, or a value of
                // another type): the compiler refuses it before the core could.
                XCTAssertEqual(c["error"] as? String, "config", "\(name): a valid configuration Swift cannot write")
                continue
            }
            do {
                try Gate.open(config: config).close()
                XCTAssertNil(c["error"], "\(name): accepted")
            } catch let error as SignoffError {
                XCTAssertEqual(error.kindName, c["error"] as? String, "\(name): \(error.message)")
                if let mentions = c["mentions"] as? String {
                    // Named as Swift spells the option.
                    XCTAssertTrue(error.message.contains(camelCase(mentions)), "\(name): \(error.message)")
                }
            }
        }
    }

    // MARK: execute.json

    func testExecuteCancellation() async throws {
        let file = try load("execute.json")
        try strict(file, ["cases", "description"], "execute.json")
        let cases = try XCTUnwrap(file["cases"] as? [[String: Any]])
        XCTAssertFalse(cases.isEmpty)
        for c in cases {
            let name = c["name"] as? String ?? "?"
            try strict(c, ["name", "approve", "cancel", "close", "runs", "finished", "resolved", "execution", "result"], name)
            // Either the caller is cancelled, or the gate is closed while the caller waits.
            let close = c["close"] != nil
            XCTAssertNotEqual(c["cancel"] != nil, close, "\(name): exactly one of cancel and close")
            let when = (close ? c["close"] : c["cancel"]) as? String
            let log = FileManager.default.temporaryDirectory
                .appendingPathComponent("signoff-execute-\(UUID().uuidString).jsonl").path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let gate = try Gate.open(config: GateConfig(auditPath: log))
            let transfer = Transfer()
            try gate.registerTool(ToolSpec(name: "transfer", approval: .required), executeJson: { _ in
                await transfer.start()
                while !(await transfer.isReleased()) { try? await Task.sleep(nanoseconds: 5_000_000) }
                await transfer.finish()
                return #"{"sent":true}"#
            })
            let watch = gate.observe()
            var registration: HandlerRegistration?
            var approver: Subscription?
            if c["approve"] as? Bool == true {
                registration = gate.onRequest { pending in _ = try pending.approve() }
            } else {
                approver = gate.subscribe()  // an approver that never answers
            }
            let task = Task { try await gate.execute(ToolCall(tool: "transfer")) }
            switch when {
            case "while_waiting":
                await waitUntil({ gate.pendingCount() == 1 }, seconds: 5)
            case "while_running":
                let deadline = Date().addingTimeInterval(5)
                while await transfer.counts().runs == 0 && Date() < deadline { await pause(ms: 5) }
            default:
                throw fail("\(name): \(String(describing: when))")
            }
            if close {
                // The caller keeps waiting: it gets the tool's own result.
                gate.close()
                await transfer.release()
                let result = try await task.value
                XCTAssertEqual(statusName(result.status), c["result"] as? String, name)
                if result.status == .executed {
                    XCTAssertEqual(parse(result.outputJson ?? "") as? [String: Bool], ["sent": true], name)
                }
            } else {
                task.cancel()  // the caller stops waiting
                do {
                    _ = try await task.value
                    XCTFail("\(name): the cancelled caller still got a result")
                } catch is CancellationError {}
                await transfer.release()
            }
            let resolved = try await firstResolved(watch)
            let expected = try XCTUnwrap(c["resolved"] as? [String: Any])
            try strict(expected, ["outcome", "cancel_reason"], "\(name).resolved")
            XCTAssertEqual(outcomeName(resolved.outcome), expected["outcome"] as? String, name)
            if let reason = expected["cancel_reason"] as? String {
                XCTAssertEqual(resolved.cancelReason.map(cancelName), reason, name)
            }
            let finished = try XCTUnwrap(c["finished"] as? NSNumber).intValue
            let deadline = Date().addingTimeInterval(3)
            while await transfer.counts().finished < finished && Date() < deadline { await pause(ms: 10) }
            await pause(ms: 50)
            await gate.flushAudit()
            let counts = await transfer.counts()
            XCTAssertEqual(counts.runs, try XCTUnwrap(c["runs"] as? NSNumber).intValue, name)
            XCTAssertEqual(counts.finished, finished, name)
            let lines = (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n") ?? []
            let executions = lines.compactMap { parse(String($0)) as? [String: Any] }
                .filter { $0["kind"] as? String == "execution" }
                .compactMap { $0["decision"] as? String }
            XCTAssertEqual(executions, (c["execution"] as? String).map { [$0] } ?? [], name)
            registration?.stop()
            approver?.close()
            watch.close()
            gate.close()
        }
    }
}

/// The `transfer` tool of execute.json: counts a run, waits until released, counts a finish.
private actor Transfer {
    private var runs = 0
    private var finished = 0
    private var released = false
    func start() { runs += 1 }
    func finish() { finished += 1 }
    func release() { released = true }
    func isReleased() -> Bool { released }
    func counts() -> (runs: Int, finished: Int) { (runs, finished) }
}

private func firstResolved(_ sub: Subscription) async throws -> ConfirmationResolved {
    while true {
        if case .resolved(let resolved) = try await nextEvent(sub) { return resolved }
    }
}

private func camelCase(_ snake: String) -> String {
    let words = snake.split(separator: "_").map(String.init)
    return (words.first ?? "") + words.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
}

private func isBool(_ value: Any) -> Bool {
    guard let number = value as? NSNumber else { return false }
    return CFGetTypeID(number) == CFBooleanGetTypeID()
}

/// A JSON number as a `UInt64` option holds it, or nil (negative, fractional, too large, or not a
/// number: not a value Swift can write there).
private func u64(_ value: Any) -> UInt64? {
    guard let number = value as? NSNumber, !isBool(number) else { return nil }
    let d = number.doubleValue
    guard d >= 0, d.rounded() == d, d < 18_446_744_073_709_551_616.0 else { return nil }
    return number.uint64Value
}

private func bool(_ value: Any) -> Bool? {
    isBool(value) ? value as? Bool : nil
}

/// The typed `GateConfig` for a vector's gate options (the core's GateConfig JSON), or nil when an
/// option cannot be written in Swift at all (a name `GateConfig` does not have, or a value of
/// another type): the compiler refuses those.
private func gateConfig(_ options: [String: Any]) -> GateConfig? {
    var c = GateConfig()
    for (key, value) in options where !(value is NSNull) {
        switch key {
        case "default_timeout_ms": guard let v = u64(value) else { return nil }; c.defaultTimeoutMs = v
        case "keywords": guard let v = value as? [String] else { return nil }; c.keywords = v
        case "deny_when_unobserved": guard let v = bool(value) else { return nil }; c.denyWhenUnobserved = v
        case "dangerously_disable_gating": guard let v = bool(value) else { return nil }; c.dangerouslyDisableGating = v
        case "bus_capacity": guard let v = u64(value) else { return nil }; c.busCapacity = v
        case "remember_resolved": guard let v = u64(value) else { return nil }; c.rememberResolved = v
        case "allowed_responders": guard let v = value as? [String] else { return nil }; c.allowedResponders = v
        case "approvers": guard let v = value as? [String: [String]] else { return nil }; c.approvers = v
        case "forbid_self_approval": guard let v = bool(value) else { return nil }; c.forbidSelfApproval = v
        case "store_path": guard let v = value as? String else { return nil }; c.storePath = v
        case "synchronous_full": guard let v = bool(value) else { return nil }; c.synchronousFull = v
        case "audit_path": guard let v = value as? String else { return nil }; c.auditPath = v
        case "audit_rotate_bytes": guard let v = u64(value) else { return nil }; c.auditRotateBytes = v
        case "token_keys": guard let v = value as? String else { return nil }; c.tokenKeys = v
        case "token_ttl_ms": guard let v = u64(value) else { return nil }; c.tokenTtlMs = v
        default: return nil
        }
    }
    return c
}
