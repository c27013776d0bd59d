// The Swift package's behaviour. Mirrors bindings-swift/tests-python/test_gate.py (which runs the
// same cases over the same C ABI on machines without Swift); run with `swift test` on a Mac after
// ./build-xcframework.sh.

import Foundation
import XCTest
import Signoff

final class SignoffTests: XCTestCase {
    override func setUp() {
        super.setUp()
        executionTimeAllowance = 60
    }

    // MARK: confirm / respond

    func testConfirmApprove() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall(sessionId: "s1", callId: "call_1"))
        let request = try await nextRequest(sub)
        XCTAssertEqual(request.tool, "delete_file")
        XCTAssertEqual(json(request.argumentsJson), ["path": "/tmp/x"])
        XCTAssertEqual(request.toolCallId, "call_1")
        XCTAssertEqual(request.sessionId, "s1")
        XCTAssertTrue(request.argumentsDigest.hasPrefix("sha256:"))
        XCTAssertFalse(request.reasons.isEmpty)
        XCTAssertEqual(gate.pending().map(\.id), [request.id])
        XCTAssertEqual(try gate.approve(request: request, responder: "alice"), .approved)
        let decision = try await pending.wait()
        guard case .approved(let requestId, let arguments, let edited, let by, _, let responder) = decision else {
            return XCTFail("expected approved, got \(decision)")
        }
        XCTAssertEqual(requestId, request.id)
        XCTAssertEqual(json(arguments), ["path": "/tmp/x"])
        XCTAssertFalse(edited)
        XCTAssertEqual(by, .person)
        XCTAssertEqual(responder, "alice")
        XCTAssertTrue(decision.isApproved())
        XCTAssertEqual(decision.outcome(), .approved)
        XCTAssertEqual(gate.pendingCount(), 0)
        let again = try await pending.wait()
        XCTAssertEqual(again, decision)
    }

    func testConfirmWithTaskAndCodable() async throws {
        struct PathArgs: Codable, Equatable { let path: String }
        let gate = try gateWithDelete()
        let requests = gate.requests()
        let approver = Task {
            for await request in requests {
                XCTAssertEqual(try request.arguments(as: PathArgs.self), PathArgs(path: "/tmp/y"))
                _ = try gate.approve(request: request)
                return
            }
        }
        let decision = try await gate.confirm(tool: "delete_file", arguments: PathArgs(path: "/tmp/y"))
        XCTAssertEqual(try decision.arguments(as: PathArgs.self), PathArgs(path: "/tmp/y"))
        try await approver.value
    }

    func testDenyWithReason() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        XCTAssertEqual(try gate.deny(request: request, reason: "not that file", responder: "bob"), .denied)
        let decision = try await pending.wait()
        guard case .denied(let requestId, let reason, let responder) = decision else {
            return XCTFail("expected denied, got \(decision)")
        }
        XCTAssertEqual(requestId, request.id)
        XCTAssertEqual(reason, "not that file")
        XCTAssertEqual(responder, "bob")
        XCTAssertFalse(decision.isApproved())
        let kinds = try await eventsUntilResolved(sub, request.id).map(kind)
        XCTAssertEqual(kinds, ["response", "resolved"])
    }

    func testDecisionAccessorsAreTheCores() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        _ = try gate.approve(request: request, scope: .session, responder: "alice")
        let decision = try await pending.wait()
        XCTAssertTrue(decision.isApproved())
        XCTAssertEqual(decision.outcome(), .approved)
        XCTAssertEqual(decision.requestId(), request.id)
        XCTAssertEqual(decision.responder(), "alice")
        XCTAssertEqual(decision.scope(), .session)
        XCTAssertEqual(decision.approvedBy(), .person)
        XCTAssertNil(decision.reason())
        XCTAssertNil(decision.cancelReason())
        XCTAssertNil(decision.timeoutMs())
        XCTAssertFalse(decision.edited())
        // Every case, also made up on the Swift side (ids that are no UUIDs, arguments that are no
        // JSON): the accessors never fail.
        let denied = Decision.denied(requestId: "r1", reason: "no", responder: "bob")
        XCTAssertEqual(denied.outcome(), .denied)
        XCTAssertEqual(denied.requestId(), "r1")
        XCTAssertEqual(denied.reason(), "no")
        XCTAssertEqual(denied.responder(), "bob")
        XCTAssertEqual(denied.scope(), .once)
        XCTAssertNil(denied.approvedBy())
        let timedOut = Decision.timedOut(requestId: "r2", timeoutMs: 5)
        XCTAssertEqual(timedOut.outcome(), .timedOut)
        XCTAssertEqual(timedOut.timeoutMs(), 5)
        XCTAssertNil(timedOut.responder())
        let cancelled = Decision.cancelled(requestId: nil, reason: .aborted)
        XCTAssertEqual(cancelled.cancelReason(), .aborted)
        XCTAssertNil(cancelled.requestId())
        XCTAssertFalse(cancelled.isApproved())
        let madeUp = Decision.approved(
            requestId: "x", argumentsJson: "not json", edited: true, by: .sessionGrant, scope: .once, responder: nil
        )
        XCTAssertTrue(madeUp.edited())
        XCTAssertEqual(madeUp.requestId(), "x")
        XCTAssertEqual(madeUp.approvedBy(), .sessionGrant)
    }

    func testTypedResponseAndRespondJson() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let p1 = try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/a"}"#))
        let r1 = try await nextRequest(sub)
        let p2 = try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/b"}"#))
        let r2 = try await nextRequest(sub)
        let response = try approveResponse(request: r1)
        XCTAssertEqual(response.id, r1.id)
        XCTAssertEqual(response.tool, r1.tool)
        XCTAssertEqual(response.argumentsDigest, r1.argumentsDigest)
        XCTAssertEqual(response.sessionId, r1.sessionId)
        XCTAssertEqual(try gate.respond(response: response), .approved)
        let body = #"{"type":"confirmation-response","id":"\#(r2.id)","decision":"deny","reason":"no"}"#
        XCTAssertEqual(try gate.respondJson(json: body), .denied)
        let d1 = try await p1.wait()
        XCTAssertTrue(d1.isApproved())
        let d2 = try await p2.wait()
        guard case .denied(_, let reason, _) = d2 else { return XCTFail("\(d2)") }
        XCTAssertEqual(reason, "no")
    }

    func testNotGatedRunsWithoutRequest() async throws {
        let gate = Gate()
        try gate.registerTool(spec: ToolSpec(name: "read_file"))
        let sub = gate.subscribe()
        let decision = try await gate.confirm(makeCall("read_file"))
        guard case .approved(let requestId, _, _, let by, _, _) = decision else { return XCTFail("\(decision)") }
        XCTAssertNil(requestId)
        XCTAssertEqual(by, .notGated)
        let quiet = await noEvent(sub)
        XCTAssertTrue(quiet)
    }

    func testEditedArguments() async throws {
        let gate = Gate()
        try gate.registerTool(spec: deleteSpec(editable: true))
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/etc/passwd"}"#))
        let request = try await nextRequest(sub)
        XCTAssertTrue(request.editable)
        XCTAssertThrowsKind(.invalidArguments) { try gate.approve(request: request, argumentsJson: #"{"path":3}"#) }
        XCTAssertEqual(try gate.approve(request: request, argumentsJson: #"{"path":"/tmp/safe"}"#), .approved)
        let decision = try await pending.wait()
        guard case .approved(_, let arguments, let edited, _, _, _) = decision else { return XCTFail("\(decision)") }
        XCTAssertTrue(edited)
        XCTAssertEqual(json(arguments), ["path": "/tmp/safe"])
    }

    func testSessionGrantAndEndSession() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let p1 = try gate.confirmCancellable(call: makeCall(sessionId: "s1"))
        let r1 = try await nextRequest(sub)
        _ = try gate.approve(request: r1, scope: .session)
        guard case .approved(_, _, _, _, let scope, _) = try await p1.wait() else { return XCTFail() }
        XCTAssertEqual(scope, .session)
        XCTAssertEqual(gate.grants(sessionId: "s1"), ["delete_file"])
        guard case .approved(_, _, _, let by, _, _) = try await gate.confirm(makeCall(sessionId: "s1")) else {
            return XCTFail()
        }
        XCTAssertEqual(by, .sessionGrant)
        let p3 = try gate.confirmCancellable(call: makeCall(sessionId: "s2"))
        let r3 = try await nextRequest(sub)
        XCTAssertEqual(r3.sessionId, "s2")
        XCTAssertEqual(gate.endSession(sessionId: "s2"), 1)
        guard case .cancelled(_, let reason) = try await p3.wait() else { return XCTFail() }
        XCTAssertEqual(reason, .sessionEnded)
        XCTAssertTrue(gate.revokeGrant(sessionId: "s1", tool: "delete_file"))
        XCTAssertEqual(gate.grants(sessionId: "s1"), [])
    }

    func testAClosedGateRunsNothingThatNeedsApprovalEvenUnderASessionGrant() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let p1 = try gate.confirmCancellable(call: makeCall(sessionId: "s1"))
        _ = try gate.approve(request: try await nextRequest(sub), scope: .session)
        guard case .approved = try await p1.wait() else { return XCTFail() }
        guard case .approved(_, _, _, let by, _, _) = try await gate.confirm(makeCall(sessionId: "s1")) else {
            return XCTFail()
        }
        XCTAssertEqual(by, .sessionGrant)
        gate.close()
        guard case .cancelled(_, let reason) = try await gate.confirm(makeCall(sessionId: "s1")) else {
            return XCTFail()
        }
        XCTAssertEqual(reason, .shutdown)
    }

    // MARK: every rejection error kind

    func testErrorKindNamesCoverTheCore() {
        let all: [ErrorKind] = [
            .unknownTool, .invalidTool, .invalidArguments, .unknownRequest, .alreadyResolved, .expired,
            .editsNotAllowed, .mismatch, .malformed, .unauthorized, .closed, .store, .noExecutor,
            .badSignature, .unknownKey, .tokenExpired, .wrongApprover, .alreadyUsed, .notPending, .config, .io,
        ]
        XCTAssertEqual(all.map(\.name), [
            "unknown_tool", "invalid_tool", "invalid_arguments", "unknown_request", "already_resolved", "expired",
            "edits_not_allowed", "mismatch", "malformed", "unauthorized", "closed", "store", "no_executor",
            "bad_signature", "unknown_key", "token_expired", "wrong_approver", "already_used", "not_pending", "config",
            "io",
        ])
    }

    func testUnknownTool() async throws {
        let gate = Gate()
        await XCTAssertThrowsKindAsync(.unknownTool) { try await gate.confirm(makeCall("nope")) }
        do {
            _ = try await gate.confirm(makeCall("nope"))
            XCTFail("expected unknownTool")
        } catch let error as SignoffError {
            guard case .UnknownTool(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("nope"))
            XCTAssertEqual(error.localizedDescription, message)
            XCTAssertEqual(error.kindName, "unknown_tool")
        }
        XCTAssertThrowsKind(.unknownTool) { try gate.evaluate(call: makeCall("nope")) }
    }

    func testInvalidTool() {
        let gate = Gate()
        XCTAssertThrowsKind(.invalidTool) { try gate.registerTool(spec: ToolSpec(name: "x", parametersJson: #"{"type":12}"#)) }
        XCTAssertThrowsKind(.invalidTool) { try gate.registerTool(spec: ToolSpec(name: "  ")) }
        XCTAssertThrowsKind(.invalidTool) { try gate.registerTool(spec: ToolSpec(name: "x", parametersJson: "{not json")) }
        XCTAssertThrowsKind(.invalidTool) {
            try gate.registerTool(spec: ToolSpec(name: "x", rules: [.pathOutside(pointer: "/p", prefixes: ["relative"])]))
        }
        // A threshold no amount exceeds would never ask for approval: refused.
        for value in [Double.nan, .infinity, -.infinity] {
            XCTAssertThrowsKind(.invalidTool) {
                try gate.registerTool(spec: ToolSpec(name: "pay", rules: [.greaterThan(pointer: "/amount", value: value)]))
            }
        }
        XCTAssertThrowsKind(.malformed) { try gate.registerToolJson(json: #"{"name":"x","aproval":"required"}"#) }
        XCTAssertEqual(gate.tools(), [])
    }

    func testInvalidArguments() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        await XCTAssertThrowsKindAsync(.invalidArguments) { try await gate.confirm(makeCall("delete_file", #"{"path":42}"#)) }
        XCTAssertThrowsKind(.malformed) { try gate.confirmCancellable(call: makeCall("delete_file", "{oops")) }
        let quiet = await noEvent(sub)
        XCTAssertTrue(quiet, "nobody is asked about a refused call")
    }

    func testUnknownRequest() {
        let gate = Gate()
        let response = ConfirmationResponse(id: UUID().uuidString.lowercased(), decision: .approve, scope: .once)
        XCTAssertThrowsKind(.unknownRequest) { try gate.respond(response: response) }
        XCTAssertEqual(try gate.cancelRequest(id: UUID().uuidString), false)
    }

    func testAlreadyResolved() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        _ = try gate.approve(request: request)
        XCTAssertThrowsKind(.alreadyResolved) { try gate.deny(request: request) }
        let decision = try await pending.wait()
        XCTAssertTrue(decision.isApproved())
    }

    func testExpiredAndTimeout() async throws {
        let gate = Gate()
        try gate.registerTool(spec: deleteSpec(timeoutMs: 150))
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        XCTAssertEqual(request.timeoutMs, 150)
        XCTAssertEqual(request.deadlineMs - request.createdAtMs, 150)
        let decision = try await pending.wait()
        guard case .timedOut(let requestId, let timeoutMs) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(requestId, request.id)
        XCTAssertEqual(timeoutMs, 150)
        let kinds = try await eventsUntilResolved(sub, request.id).map(kind)
        XCTAssertEqual(kinds, ["timeout", "resolved"])
        XCTAssertThrowsKind(.expired) { try gate.approve(request: request) }
    }

    func testEditsNotAllowed() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        XCTAssertFalse(request.editable)
        XCTAssertThrowsKind(.editsNotAllowed) { try gate.approve(request: request, argumentsJson: #"{"path":"/other"}"#) }
        XCTAssertEqual(try gate.approve(request: request, argumentsJson: request.argumentsJson), .approved)
        guard case .approved(_, _, let edited, _, _, _) = try await pending.wait() else { return XCTFail() }
        XCTAssertFalse(edited)
    }

    func testMismatch() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall(sessionId: "s1"))
        let request = try await nextRequest(sub)
        var wrongTool = try approveResponse(request: request)
        wrongTool.tool = "other_tool"
        var wrongDigest = try approveResponse(request: request)
        wrongDigest.argumentsDigest = "sha256:00"
        var wrongSession = try approveResponse(request: request)
        wrongSession.sessionId = "s2"
        for (field, response) in [("tool", wrongTool), ("arguments_digest", wrongDigest), ("session_id", wrongSession)] {
            do {
                _ = try gate.respond(response: response)
                XCTFail("\(field): expected mismatch")
            } catch let error as SignoffError {
                XCTAssertEqual(error.kind(), .mismatch)
                XCTAssertTrue(error.message.contains(field), error.message)
            }
        }
        XCTAssertEqual(try gate.respond(response: try approveResponse(request: request)), .approved)
        let decision = try await pending.wait()
        XCTAssertTrue(decision.isApproved())
    }

    func testMalformed() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        let bad = [
            "not json", "[]", #"{"id":"\#(request.id)"}"#,
            #"{"id":"\#(request.id)","decision":"approve","extra":1}"#,
            #"{"type":"confirmation-request","id":"\#(request.id)","decision":"approve"}"#,
            #"{"id":"\#(request.id)","decision":"deny","arguments":{"path":"/x"}}"#,
        ]
        for body in bad {
            XCTAssertThrowsKind(.malformed) { try gate.respondJson(json: body) }
        }
        // An id that is not a UUID names no request.
        XCTAssertThrowsKind(.unknownRequest) {
            try gate.respond(response: ConfirmationResponse(id: "nope", decision: .deny, scope: .once))
        }
        XCTAssertEqual(gate.pendingCount(), 1)
        _ = try gate.deny(request: request)
        guard case .denied = try await pending.wait() else { return XCTFail() }
    }

    func testUnauthorized() async throws {
        let gate = try gateWithDelete(GateConfig(allowedResponders: ["alice"]))
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        XCTAssertThrowsKind(.unauthorized) { try gate.approve(request: request, responder: "mallory") }
        XCTAssertThrowsKind(.unauthorized) { try gate.approve(request: request) }
        XCTAssertEqual(try gate.approve(request: request, responder: "alice"), .approved)
        guard case .approved(_, _, _, _, _, let responder) = try await pending.wait() else { return XCTFail() }
        XCTAssertEqual(responder, "alice")
    }

    func testClosed() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        gate.close()
        XCTAssertTrue(gate.isClosed())
        guard case .cancelled(_, let reason) = try await pending.wait() else { return XCTFail() }
        XCTAssertEqual(reason, .shutdown)
        XCTAssertThrowsKind(.closed) { try gate.approve(request: request) }
        guard case .cancelled(_, let again) = try await gate.confirm(makeCall()) else { return XCTFail() }
        XCTAssertEqual(again, .shutdown)
    }

    func testNoExecutor() async throws {
        let gate = try gateWithDelete()
        let result = try await gate.execute(makeCall(callId: "c1"))
        XCTAssertEqual(result.status, .rejected)
        XCTAssertEqual(result.errorKind, .noExecutor)
        XCTAssertTrue(result.isError)
        XCTAssertEqual(result.callId, "c1")
        XCTAssertTrue(result.content.contains("did not run"))
    }

    // MARK: cancellation, unobserved requests

    func testCancelHandle() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        pending.cancel()
        guard case .cancelled(let requestId, let reason) = try await pending.wait() else { return XCTFail() }
        XCTAssertNil(requestId)
        XCTAssertEqual(reason, .aborted)
        let resolved = try await resolvedEvent(sub, request.id)
        XCTAssertEqual(resolved.outcome, .cancelled)
        XCTAssertEqual(resolved.cancelReason, .aborted)
        XCTAssertEqual(gate.pendingCount(), 0)
        XCTAssertTrue(pending.isFinished())
        XCTAssertThrowsKind(.alreadyResolved) { try gate.approve(request: request) }
    }

    func testWhenSettledTellsEachListenerOnce() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        let told = CallCount()
        pending.whenSettled(listener: OnSettled { told.increment() })
        XCTAssertNil(try pending.decision())
        XCTAssertFalse(pending.isFinished())
        _ = try gate.approve(request: request)
        await waitUntil { told.value == 1 }
        XCTAssertEqual(told.value, 1)
        XCTAssertEqual(try pending.decision()?.isApproved(), true)
        let late = CallCount()
        pending.whenSettled(listener: OnSettled { late.increment() })
        XCTAssertEqual(late.value, 1, "already settled: told at once")
    }

    func testSettledSinkIsToldEachTokenOnce() async throws {
        let log = TokenLog()
        let sink = try registerSettledSink(sink: log)
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        try pending.whenSettledToken(sink: sink, token: 7)
        try pending.whenSettledToken(sink: sink, token: 8)
        XCTAssertEqual(log.tokens, [])
        _ = try gate.deny(request: request, reason: "no")
        await waitUntil { log.tokens.count == 2 }
        XCTAssertEqual(log.tokens.sorted(), [7, 8])
        try pending.whenSettledToken(sink: sink, token: 9)
        XCTAssertEqual(log.tokens.last, 9, "already settled: told at once")
        XCTAssertThrowsKind(.config) { try pending.whenSettledToken(sink: sink + 1000, token: 1) }
    }

    func testManyConfirmsResumeTheirOwnCalls() async throws {
        // The extension's `confirm` waits through one sink for the process: each call must be
        // resumed with its own decision.
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let paths = (0..<40).map { "/tmp/\($0)" }
        let decisions = Task {
            try await withThrowingTaskGroup(of: (String, Decision).self) { group in
                for path in paths {
                    group.addTask {
                        let decision = try await gate.confirm(makeCall("delete_file", #"{"path":"\#(path)"}"#))
                        return (path, decision)
                    }
                }
                var out: [String: Decision] = [:]
                for try await (path, decision) in group { out[path] = decision }
                return out
            }
        }
        for _ in paths {
            let request = try await nextRequest(sub)
            let path = try request.arguments(as: [String: String].self)["path"] ?? ""
            if path.hasSuffix("7") {
                _ = try gate.deny(request: request, reason: path)
            } else {
                _ = try gate.approve(request: request)
            }
        }
        let out = try await decisions.value
        XCTAssertEqual(out.count, paths.count)
        for (path, decision) in out {
            if path.hasSuffix("7") {
                guard case .denied(_, let reason, _) = decision else { return XCTFail("\(path): \(decision)") }
                XCTAssertEqual(reason, path)
            } else {
                XCTAssertTrue(decision.isApproved(), path)
            }
        }
    }

    func testWhenSettledOnCancel() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        _ = try await nextRequest(sub)
        let told = CallCount()
        pending.whenSettled(listener: OnSettled { told.increment() })
        pending.cancel()
        await waitUntil { told.value == 1 }
        let decision = try XCTUnwrap(pending.decision())
        guard case .cancelled(let requestId, let reason) = decision else { return XCTFail("\(decision)") }
        XCTAssertNil(requestId)
        XCTAssertEqual(reason, .aborted)
        let execution = try gate.executeCancellable(call: makeCall())
        _ = try await nextRequest(sub)
        let executionTold = CallCount()
        execution.whenSettled(listener: OnSettled { executionTold.increment() })
        execution.cancel()
        await waitUntil { executionTold.value == 1 }
        XCTAssertNil(execution.result())
        XCTAssertTrue(execution.isFinished())
    }

    func testTaskCancelCancelsConfirmation() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let task = Task { try await gate.confirm(makeCall()) }
        let request = try await nextRequest(sub)
        task.cancel()
        let decision = try await task.value
        guard case .cancelled(_, let reason) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(reason, .aborted)
        let resolved = try await resolvedEvent(sub, request.id)
        XCTAssertEqual(resolved.cancelReason, .aborted)
        XCTAssertEqual(gate.pendingCount(), 0)
    }

    func testAlreadyCancelledTaskNeverAsks() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let task = Task {
            while !Task.isCancelled { await pause(ms: 1) }
            return try await gate.confirm(makeCall())
        }
        task.cancel()
        guard case .cancelled(_, let reason) = try await task.value else { return XCTFail() }
        XCTAssertEqual(reason, .aborted)
        await waitUntil { gate.pendingCount() == 0 }
        XCTAssertEqual(gate.pendingCount(), 0)
        _ = sub
    }

    func testTaskCancelCancelsExecution() async throws {
        let gate = Gate()
        let ran = Recorder()
        try gate.registerTool(deleteSpec(), executeJson: { json in
            await ran.add(json)
            return "\"ran\""
        })
        let sub = gate.subscribe()
        let task = Task { try await gate.execute(makeCall()) }
        let request = try await nextRequest(sub)
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("expected CancellationError")
        } catch is CancellationError {}
        let resolved = try await resolvedEvent(sub, request.id)
        XCTAssertEqual(resolved.cancelReason, .aborted)
        let items = await ran.items
        XCTAssertEqual(items, [])
    }

    func testClosedGateHasNoApprovers() async throws {
        // Nothing is asked once closed: nobody attached before or after counts (the core's count).
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        XCTAssertEqual(gate.approverCount(), 1)
        gate.close()
        XCTAssertEqual(gate.approverCount(), 0)
        let late = gate.subscribe()
        XCTAssertEqual(gate.approverCount(), 0)
        sub.close()
        late.close()
    }

    func testNoSubscribersCancels() async throws {
        let gate = try gateWithDelete()
        guard case .cancelled(_, let reason) = try await gate.confirm(makeCall()) else { return XCTFail() }
        XCTAssertEqual(reason, .noApprover)
        let sub = gate.subscribe()
        let pending = try gate.confirmCancellable(call: makeCall())
        _ = try await nextRequest(sub)
        XCTAssertEqual(gate.approverCount(), 1)
        sub.close()
        XCTAssertEqual(gate.approverCount(), 0)
        guard case .cancelled(_, let reason2) = try await pending.wait() else { return XCTFail() }
        XCTAssertEqual(reason2, .noApprover)
        let after = await sub.next()
        XCTAssertNil(after)
    }

    func testUnobservedRequestsWaitWhenConfigured() async throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false))
        let pending = try gate.confirmCancellable(call: makeCall())
        await waitUntil { gate.pendingCount() == 1 }
        let request = try XCTUnwrap(gate.pending().first)
        XCTAssertEqual(try gate.approve(request: request), .approved)
        let decision = try await pending.wait()
        XCTAssertTrue(decision.isApproved())
    }

    // MARK: event stream

    func testEventStreamOrderAndTermination() async throws {
        let gate = try gateWithDelete()
        let events = gate.events()
        XCTAssertEqual(gate.approverCount(), 1)
        let pending = try gate.confirmCancellable(call: makeCall())
        var kinds: [String] = []
        for await event in events {
            kinds.append(kind(event))
            switch event {
            case .request(let request):
                _ = try gate.approve(request: request, responder: "alice")
            case .response(let response):
                XCTAssertEqual(response.responder, "alice")
                XCTAssertNotNil(response.atMs)
            case .resolved(let resolved):
                XCTAssertEqual(resolved.outcome, .approved)
                XCTAssertEqual(resolved.responder, "alice")
            default:
                XCTFail("unexpected \(event)")
            }
            if kinds.count == 3 { break }
        }
        XCTAssertEqual(kinds, ["request", "response", "resolved"])
        let decision = try await pending.wait()
        XCTAssertTrue(decision.isApproved())
        // Leaving the loop terminated the stream, which closed its subscription.
        await waitUntil { gate.approverCount() == 0 }
        XCTAssertEqual(gate.approverCount(), 0)
    }

    func testCancellingTheConsumerClosesTheSubscription() async throws {
        let gate = try gateWithDelete()
        let consumer = Task {
            var count = 0
            for await _ in gate.events() { count += 1 }
            return count
        }
        await waitUntil { gate.approverCount() == 1 }
        XCTAssertEqual(gate.approverCount(), 1)
        consumer.cancel()
        let count = await consumer.value
        XCTAssertEqual(count, 0)
        await waitUntil { gate.approverCount() == 0 }
        XCTAssertEqual(gate.approverCount(), 0)
    }

    func testCloseEndsAWaitingNext() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let waiter = Task { await sub.next() }
        await pause(ms: 50)
        sub.close()
        let event = await waiter.value
        XCTAssertNil(event)
        XCTAssertEqual(gate.approverCount(), 0)
    }

    func testASubscriptionForSomeTypesGetsOnlyThoseAndStillHearsOfALag() async throws {
        let gate = try gateWithDelete()
        let every = gate.observe()
        let requests = gate.subscribeOnly(types: [.request])
        XCTAssertEqual(gate.approverCount(), 1)
        for path in ["/a", "/b"] {
            let pending = try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"\#(path)"}"#))
            // The second request comes right after the first: no response, no resolution.
            guard case .request(let request) = try await nextEvent(requests) else { return XCTFail() }
            XCTAssertEqual(json(request.argumentsJson)?["path"] as? String, path)
            XCTAssertEqual(try gate.approve(request: request), .approved)
            guard case .approved = try await pending.wait() else { return XCTFail() }
        }
        var kinds: [String] = []
        for _ in 0..<6 {
            let event = try await nextEvent(every)
            kinds.append(kind(event))
        }
        XCTAssertEqual(kinds, ["request", "response", "resolved", "request", "response", "resolved"])
        requests.close()
        every.close()
        gate.close()

        let lagging = try gateWithDelete(GateConfig(denyWhenUnobserved: false, busCapacity: 2))
        let nothing = lagging.observeOnly(types: [])
        let handles = try (0..<4).map { i in try lagging.confirmCancellable(call: makeCall("delete_file", #"{"path":"/\#(i)"}"#)) }
        await waitUntil { lagging.pendingCount() == 4 }
        await pause(ms: 50)  // a request is stored just before it is published
        guard case .lagged(_, let snapshot, _) = try await nextEvent(nothing) else { return XCTFail() }
        XCTAssertEqual(snapshot.count, 4)
        for handle in handles { handle.cancel() }
        lagging.close()
    }

    func testEventTypesByTheirNames() throws {
        XCTAssertEqual(try EventType(named: "confirmation-request"), .request)
        XCTAssertEqual(try EventType(named: "confirmation-response"), .response)
        XCTAssertEqual(try EventType(named: "confirmation-timeout"), .timeout)
        XCTAssertEqual(try EventType(named: "confirmation-resolved"), .resolved)
        for wrong in ["confirmation_request", "request", "lagged", ""] {
            XCTAssertThrowsError(try EventType(named: wrong)) { error in
                XCTAssertEqual((error as? SignoffError)?.kind(), .malformed)
            }
        }
    }

    func testObserversAreNotApproversAndSubscriptionsEndWithTheGate() async throws {
        let gate = try gateWithDelete()
        let watch = gate.observe()
        XCTAssertEqual(gate.approverCount(), 0)
        guard case .cancelled(_, let reason) = try await gate.confirm(makeCall()) else { return XCTFail() }
        XCTAssertEqual(reason, .noApprover)  // only an observer: nobody can approve
        let seen = try await nextEvent(watch)
        XCTAssertEqual(kind(seen), "request")  // but it saw the request
        let sub = gate.subscribe()
        XCTAssertEqual(gate.approverCount(), 1)
        watch.close()
        watch.close()  // idempotent
        XCTAssertEqual(gate.approverCount(), 1)  // an observer detaches no approver
        let afterClose = await watch.next()
        XCTAssertNil(afterClose)
        let pending = try gate.confirmCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        gate.close()
        // A subscription delivers what was published before the close, then ends.
        var kinds: [String] = []
        while let event = await sub.next() { kinds.append(kind(event)) }
        XCTAssertEqual(kinds, ["resolved"])
        let subscribedAfterClose = await gate.subscribe().next()
        XCTAssertNil(subscribedAfterClose)
        guard case .cancelled(let requestId, let shutdown) = try await pending.wait() else { return XCTFail() }
        XCTAssertEqual(requestId, request.id)
        XCTAssertEqual(shutdown, .shutdown)
    }

    func testLaggedSubscriberGetsPendingSnapshot() async throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false, busCapacity: 2))
        let sub = gate.subscribe()
        let handles = try (0..<4).map { i in try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/\#(i)"}"#)) }
        await waitUntil { gate.pendingCount() == 4 }
        await pause(ms: 50)  // a request is stored just before it is published
        let event = try await nextEvent(sub)
        guard case .lagged(let missed, let pendingRequests, let more) = event else { return XCTFail("\(event)") }
        XCTAssertGreaterThanOrEqual(missed, 1)
        let paths = pendingRequests.compactMap { json($0.argumentsJson)?["path"] as? String }.sorted()
        XCTAssertEqual(paths, ["/0", "/1", "/2", "/3"])
        XCTAssertNil(more, "the snapshot holds every pending request")
        handles.forEach { $0.cancel() }
    }

    func testLaggedSnapshotIsBoundedAndContinuesInPages() async throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false, busCapacity: 2))
        let sub = gate.subscribe()
        let handles = try (0..<1100).map { i in
            try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/\#(i)"}"#))
        }
        await waitUntil({ gate.pendingCount() == 1100 }, seconds: 10)
        await pause(ms: 50)  // a request is stored just before it is published
        guard case .lagged(let missed, let snapshot, let more) = try await nextEvent(sub) else { return XCTFail() }
        XCTAssertGreaterThanOrEqual(missed, 1)
        XCTAssertEqual(snapshot.count, 1000)
        let last = try XCTUnwrap(snapshot.last)
        XCTAssertEqual(more, "\(last.createdAtMs)-\(last.id)")
        let rest = try gate.pendingPage(after: try XCTUnwrap(more), limit: 1000)
        XCTAssertEqual(rest.requests.count, 100)
        XCTAssertNil(rest.next)
        XCTAssertEqual(snapshot.map(\.id) + rest.requests.map(\.id), gate.pending().map(\.id))
        gate.close()
        _ = handles
    }

    /// Swift only (the Python suite cannot run `requests()`): after a lag the stream re-delivers
    /// the snapshot and then every further page, so no pending request is lost.
    func testRequestsStreamResyncsEveryPendingRequestAfterALag() async throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false, busCapacity: 2))
        let requests = gate.requests()
        let handles = try (0..<1100).map { i in
            try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/\#(i)"}"#))
        }
        let collector = Task {
            var ids = Set<String>()
            for await request in requests {
                ids.insert(request.id)
                if ids.count == 1100 { break }
            }
            return ids.count
        }
        let timer = Task {
            try? await Task.sleep(nanoseconds: 20_000_000_000)
            if !Task.isCancelled { collector.cancel() }
        }
        let count = await collector.value
        timer.cancel()
        XCTAssertEqual(count, 1100)
        gate.close()
        _ = handles
    }

    // MARK: pending requests in pages

    func testPendingPageWalksEveryRequestOnceOldestFirst() async throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false))
        let handles = try (0..<2500).map { i in
            try gate.confirmCancellable(call: makeCall("delete_file", #"{"path":"/\#(i)"}"#))
        }
        await waitUntil({ gate.pendingCount() == 2500 }, seconds: 10)
        var pages: [[ConfirmationRequest]] = []
        var after: String? = nil
        while true {
            let page = try gate.pendingPage(after: after, limit: 1000)
            pages.append(page.requests)
            guard let next = page.next else { break }
            let last = try XCTUnwrap(page.requests.last)
            XCTAssertEqual(next, "\(last.createdAtMs)-\(last.id)")
            after = next
        }
        XCTAssertEqual(pages.map(\.count), [1000, 1000, 500])
        let walked = pages.flatMap { $0 }
        XCTAssertEqual(Set(walked.map(\.id)).count, 2500)
        XCTAssertEqual(walked.map(\.id), gate.pending().map(\.id))
        // oldest first: by creation time, then id (lowercase hyphenated UUIDs sort like their bytes)
        for (a, b) in zip(walked, walked.dropFirst()) {
            XCTAssertTrue((a.createdAtMs, a.id) < (b.createdAtMs, b.id), "\(a.id) before \(b.id)")
        }
        // defaults: from the oldest, 1,000 at a time; a limit of 0 is refused, as in every language
        let first = try gate.pendingPage()
        XCTAssertEqual(first.requests.map(\.id), pages[0].map(\.id))
        XCTAssertThrowsKind(.malformed) { try gate.pendingPage(limit: 0) }
        XCTAssertEqual(try gate.pendingPage(limit: .max).requests.count, 2500)
        // a request answered between pages is simply not there; nothing is skipped or repeated
        XCTAssertEqual(try gate.approve(request: pages[1][0]), .approved)
        let second = try gate.pendingPage(after: first.next, limit: 1000)
        XCTAssertEqual(second.requests.map(\.id), pages[1].dropFirst().map(\.id) + [pages[2][0].id])
        gate.close()
        _ = handles
    }

    func testPendingPageRefusesABadCursor() throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false))
        let id = UUID().uuidString.lowercased()
        for bad in ["garbage", "", "123", "123-not-a-uuid", "x-\(id)", "-1-\(id)"] {
            XCTAssertThrowsKind(.malformed) { try gate.pendingPage(after: bad, limit: 10) }
        }
        // a well-formed cursor past every request: an empty last page
        let page = try gate.pendingPage(after: "\(UInt64(1) << 63)-\(id)", limit: 10)
        XCTAssertEqual(page.requests, [])
        XCTAssertNil(page.next)
    }

    // MARK: foreign handler

    final class Approver: ApprovalHandler {
        let seen = Recorder()
        func handle(request: PendingRequest) async throws {
            await seen.add(request.request().id)
            await pause(ms: 10)
            XCTAssertTrue(request.isPending())
            _ = try request.approveWith(responder: "swift-handler")
        }
    }

    final class Silent: ApprovalHandler {
        func handle(request: PendingRequest) async throws {}
    }

    struct UICrashed: Error, CustomStringConvertible {
        var description: String { "ui crashed" }
    }

    func testForeignHandlerApproves() async throws {
        let gate = try gateWithDelete()
        let handler = Approver()
        let registration = gate.onRequest(handler: handler)
        XCTAssertTrue(registration.isActive())
        let decision = try await gate.confirm(makeCall())
        guard case .approved(let requestId, _, _, _, _, let responder) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(responder, "swift-handler")
        let seen = await handler.seen.items
        XCTAssertEqual(seen, [requestId].compactMap { $0 })
        registration.stop()
        XCTAssertFalse(registration.isActive())
        guard case .cancelled(_, let reason) = try await gate.confirm(makeCall()) else { return XCTFail() }
        XCTAssertEqual(reason, .noApprover)
    }

    func testClosureHandler() async throws {
        let gate = try gateWithDelete()
        let registration = gate.onRequest { pending in
            _ = try pending.deny(reason: "closure says no", responder: "closure")
        }
        let decision = try await gate.confirm(makeCall())
        guard case .denied(_, let reason, let responder) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(reason, "closure says no")
        XCTAssertEqual(responder, "closure")
        registration.stop()
    }

    func testForeignHandlerThatDoesNotAnswerFailsTheApproval() async throws {
        let gate = try gateWithDelete()
        let sub = gate.subscribe()
        let registration = gate.onRequest(handler: Silent())
        let decision = try await gate.confirm(makeCall())
        guard case .cancelled(let requestId, let reason) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(reason, .approvalFailed)
        let resolved = try await resolvedEvent(sub, try XCTUnwrap(requestId))
        XCTAssertEqual(resolved.outcome, .cancelled)
        XCTAssertEqual(resolved.cancelReason, .approvalFailed)
        XCTAssertNil(resolved.reason, "the detail goes to the audit log, not to the events or the model")
        registration.stop()
    }

    func testForeignHandlerThatThrowsFailsTheApproval() async throws {
        let gate = Gate()
        let ran = Recorder()
        try gate.registerTool(deleteSpec(), executeJson: { json in
            await ran.add(json)
            return "\"ran\""
        })
        let registration = gate.onRequest { _ in throw UICrashed() }
        guard case .cancelled(_, let reason) = try await gate.confirm(makeCall()) else { return XCTFail() }
        XCTAssertEqual(reason, .approvalFailed)
        let result = try await gate.execute(makeCall())
        XCTAssertEqual(result.status, .cancelled)
        XCTAssertTrue(result.isError)
        guard case .cancelled(_, let reason2)? = result.decision else {
            return XCTFail("\(String(describing: result.decision))")
        }
        XCTAssertEqual(reason2, .approvalFailed)
        XCTAssertTrue(result.content.contains("approval step failed"), result.content)
        XCTAssertFalse(result.content.contains("ui crashed"), result.content)
        registration.stop()
        let registration2 = gate.onRequest { _ in throw CallbackError.Failed(message: "window closed") }
        let result2 = try await gate.execute(makeCall())
        XCTAssertEqual(result2.status, .cancelled)
        guard case .cancelled(_, let reason3)? = result2.decision else { return XCTFail() }
        XCTAssertEqual(reason3, .approvalFailed)
        XCTAssertFalse(result2.content.contains("window closed"), result2.content)
        XCTAssertFalse(result2.error?.contains("window closed") ?? false)
        registration2.stop()
        let items = await ran.items
        XCTAssertEqual(items, [])
    }

    func testThrowingHandlerWithAllowedRespondersFailsAtOnce() async throws {
        // The handler's failure is not a response: the authenticator (only "alice" may answer)
        // does not hold it back, so the call ends at once instead of waiting for its deadline.
        let gate = try Gate.open(config: GateConfig(allowedResponders: ["alice"]))
        let ran = Recorder()
        try gate.registerTool(deleteSpec(timeoutMs: 5000), executeJson: { json in
            await ran.add(json)
            return "\"ran\""
        })
        let registration = gate.onRequest { _ in throw UICrashed() }
        let start = Date()
        let result = try await gate.execute(makeCall(callId: "c1"))
        XCTAssertLessThan(Date().timeIntervalSince(start), 2, "the call waited for its deadline")
        XCTAssertEqual(result.status, .cancelled)
        XCTAssertEqual(result.callId, "c1")
        guard case .cancelled(_, let reason)? = result.decision else {
            return XCTFail("\(String(describing: result.decision))")
        }
        XCTAssertEqual(reason, .approvalFailed)
        let items = await ran.items
        XCTAssertEqual(items, [])
        XCTAssertFalse(result.content.contains("ui crashed"), result.content)
        XCTAssertFalse(result.error?.contains("ui crashed") ?? false)
        XCTAssertTrue(result.content.contains("approval step failed"), result.content)
        XCTAssertEqual(gate.pendingCount(), 0)
        registration.stop()
    }

    func testForeignHandlerSeesAlreadyPendingRequests() async throws {
        let gate = try gateWithDelete(GateConfig(denyWhenUnobserved: false))
        let pending = try gate.confirmCancellable(call: makeCall())
        await waitUntil { gate.pendingCount() == 1 }
        let registration = gate.onRequest(handler: Approver())
        let decision = try await pending.wait()
        XCTAssertTrue(decision.isApproved())
        registration.stop()
    }

    // MARK: executor, batch

    struct PathArgs: Codable, Equatable { let path: String }

    func testExecutorRunsOnceAfterApproval() async throws {
        let gate = Gate()
        let calls = Recorder()
        try gate.registerTool(deleteSpec()) { (args: PathArgs) -> [String: String] in
            await calls.add(args.path)
            return ["deleted": args.path]
        }
        let sub = gate.subscribe()
        let pending = try gate.executeCancellable(call: makeCall(callId: "c1"))
        let request = try await nextRequest(sub)
        let before = await calls.items
        XCTAssertEqual(before, [], "nothing runs before the approval")
        _ = try gate.approve(request: request)
        let maybeResult = await pending.wait()
        let result = try XCTUnwrap(maybeResult)
        XCTAssertEqual(result.status, .executed)
        XCTAssertFalse(result.isError)
        XCTAssertEqual(try result.output(as: [String: String].self), ["deleted": "/tmp/x"])
        XCTAssertEqual(result.callId, "c1")
        XCTAssertEqual(result.requestId, request.id)
        XCTAssertEqual(result.decision?.isApproved(), true)
        let after = await calls.items
        XCTAssertEqual(after, ["/tmp/x"])
    }

    func testExecutorDeniedDoesNotRun() async throws {
        let gate = Gate()
        let calls = Recorder()
        try gate.registerTool(deleteSpec(), executeJson: { json in
            await calls.add(json)
            return "\"ran\""
        })
        let sub = gate.subscribe()
        let pending = try gate.executeCancellable(call: makeCall())
        let request = try await nextRequest(sub)
        _ = try gate.deny(request: request, reason: "no way")
        let maybeResult = await pending.wait()
        let result = try XCTUnwrap(maybeResult)
        XCTAssertEqual(result.status, .denied)
        XCTAssertTrue(result.isError)
        XCTAssertTrue(result.content.contains("no way"))
        XCTAssertTrue(result.content.contains("did not run"))
        let items = await calls.items
        XCTAssertEqual(items, [])
    }

    func testExecutorEditedArgumentsAndFailures() async throws {
        struct DiskOnFire: Error, CustomStringConvertible { var description: String { "disk on fire" } }
        let gate = Gate()
        let calls = Recorder()
        try gate.registerTool(deleteSpec(editable: true)) { (args: PathArgs) -> String in
            await calls.add(args.path)
            return args.path
        }
        try gate.registerTool(ToolSpec(name: "fail_tool"), executeJson: { _ in throw DiskOnFire() })
        try gate.registerTool(ToolSpec(name: "text_tool"), executeJson: { _ in "plain text" })
        try gate.registerTool(ToolSpec(name: "dup_tool"), executeJson: { _ in #"{"ok":true,"ok":false}"# })
        let sub = gate.subscribe()
        let pending = try gate.executeCancellable(call: makeCall("delete_file", #"{"path":"/etc"}"#))
        let request = try await nextRequest(sub)
        _ = try gate.approve(request: request, argumentsJson: #"{"path":"/tmp/ok"}"#)
        let maybeEdited = await pending.wait()
        let edited = try XCTUnwrap(maybeEdited)
        XCTAssertTrue(edited.edited)
        XCTAssertEqual(json(edited.argumentsJson ?? ""), ["path": "/tmp/ok"])
        XCTAssertTrue(edited.content.contains("changed the arguments"))
        let items = await calls.items
        XCTAssertEqual(items, ["/tmp/ok"])
        let failed = try await gate.execute(makeCall("fail_tool", "{}"))
        XCTAssertEqual(failed.status, .failed)
        XCTAssertTrue(failed.error?.contains("disk on fire") ?? false, "\(String(describing: failed.error))")
        let notJson = try await gate.execute(makeCall("text_tool", "{}"))
        XCTAssertEqual(notJson.status, .failed)
        XCTAssertTrue(notJson.error?.contains("not acceptable JSON") ?? false, "\(String(describing: notJson.error))")
        // the output is read strictly too: no value is silently picked for the model
        let repeated = try await gate.execute(makeCall("dup_tool", "{}"))
        XCTAssertEqual(repeated.status, .failed)
        XCTAssertTrue(repeated.error?.contains("duplicate key") ?? false, "\(String(describing: repeated.error))")
        XCTAssertNil(repeated.outputJson)
    }

    func testBatchOrder() async throws {
        let gate = Gate()
        let calls = Recorder()
        try gate.registerTool(deleteSpec()) { (args: PathArgs) -> String in
            await calls.add(args.path)
            return args.path
        }
        try gate.registerTool(ToolSpec(name: "read_file"), executeJson: { _ in "\"contents\"" })
        let sub = gate.subscribe()
        let batch = Task {
            try await gate.executeBatch([
                makeCall("delete_file", #"{"path":"/first"}"#, callId: "a"),
                makeCall("read_file", "{}", callId: "b"),
                makeCall("delete_file", #"{"path":"/third"}"#, callId: "c"),
            ])
        }
        var requests: [String: ConfirmationRequest] = [:]
        while requests.count < 2 {
            let request = try await nextRequest(sub)
            requests[request.toolCallId ?? ""] = request
        }
        _ = try gate.deny(request: try XCTUnwrap(requests["c"]), reason: "no")
        await pause(ms: 50)
        _ = try gate.approve(request: try XCTUnwrap(requests["a"]))
        let results = try await batch.value
        XCTAssertEqual(results.map(\.callId), ["a", "b", "c"])
        XCTAssertEqual(results.map(\.status), [.executed, .executed, .denied])
        XCTAssertEqual(try results[1].output(as: String.self), "contents")
        let items = await calls.items
        XCTAssertEqual(items, ["/first"])
    }

    // MARK: call context (the core's CallContext, handed to every executor)

    /// What a `CallContext` says about its call (`CallContext` itself holds an object, `gate`).
    struct CallFacts: Equatable, Sendable {
        let tool: String
        let callId: String?
        let requestId: String?
        let sessionId: String
        let edited: Bool

        init(tool: String, callId: String?, requestId: String?, sessionId: String, edited: Bool) {
            self.tool = tool
            self.callId = callId
            self.requestId = requestId
            self.sessionId = sessionId
            self.edited = edited
        }

        init(_ c: CallContext) {
            self.init(tool: c.tool, callId: c.callId, requestId: c.requestId, sessionId: c.sessionId, edited: c.edited)
        }
    }

    actor ContextLog {
        private(set) var byPath: [String: CallFacts] = [:]
        func add(_ path: String, _ facts: CallFacts) { byPath[path] = facts }
    }

    func testAnApprovedCallSeesTheRequestThePersonAnswered() async throws {
        let gate = Gate()
        let log = ContextLog()
        try gate.registerTool(deleteSpec(editable: true)) { (args: PathArgs, context: CallContext) -> String in
            XCTAssertFalse(context.gate.isClosed())
            await log.add(args.path, CallFacts(context))
            return "ok"
        }
        let sub = gate.subscribe()
        for (path, edit) in [("/a", nil), ("/b", "/b-edited")] as [(String, String?)] {
            let pending = try gate.executeCancellable(call: makeCall("delete_file", #"{"path":"\#(path)"}"#, sessionId: "s1", callId: "c\(path)"))
            let request = try await nextRequest(sub)
            _ = try gate.approve(request: request, argumentsJson: edit.map { #"{"path":"\#($0)"}"# })
            let maybeResult = await pending.wait()
            XCTAssertEqual(try XCTUnwrap(maybeResult).status, .executed)
            let seen = await log.byPath[edit ?? path]
            XCTAssertEqual(seen, CallFacts(tool: "delete_file", callId: "c\(path)", requestId: request.id, sessionId: "s1", edited: edit != nil))
        }
        gate.close()
    }

    func testAnUngatedCallHasNoRequest() async throws {
        let gate = try Gate.open(config: GateConfig(dangerouslyDisableGating: true))
        let log = ContextLog()
        try gate.registerTool(deleteSpec(), executeJson: { (_: String, context: CallContext) in
            await log.add("/u", CallFacts(context))
            return "\"ok\""
        })
        let result = try await gate.execute(makeCall("delete_file", #"{"path":"/u"}"#))
        XCTAssertEqual(result.status, .executed)
        let seen = await log.byPath["/u"]
        XCTAssertEqual(seen, CallFacts(tool: "delete_file", callId: nil, requestId: nil, sessionId: "default", edited: false))
        gate.close()
    }

    func testConcurrentCallsEachSeeTheirOwnContext() async throws {
        let gate = Gate()
        let log = ContextLog()
        let started = Recorder()
        try gate.registerTool(deleteSpec()) { (args: PathArgs, context: CallContext) -> String in
            await started.add(args.path)
            var both = false
            for _ in 0..<500 where !both {  // both run at once
                both = await started.items.count == 2
                if !both { await pause(ms: 10) }
            }
            await log.add(args.path, CallFacts(context))
            return "ok"
        }
        let sub = gate.subscribe()
        let pending = try ["/a", "/b"].map { p in
            try gate.executeCancellable(call: makeCall("delete_file", #"{"path":"\#(p)"}"#, sessionId: "s\(p)", callId: "c\(p)"))
        }
        var requests: [String: ConfirmationRequest] = [:]
        while requests.count < 2 {
            let request = try await nextRequest(sub)
            requests[request.toolCallId ?? ""] = request
        }
        _ = try gate.approve(request: try XCTUnwrap(requests["c/b"]))
        _ = try gate.approve(request: try XCTUnwrap(requests["c/a"]))
        for p in pending {
            let maybeResult = await p.wait()
            XCTAssertEqual(try XCTUnwrap(maybeResult).status, .executed)
        }
        for p in ["/a", "/b"] {
            let seen = await log.byPath[p]
            XCTAssertEqual(seen, CallFacts(tool: "delete_file", callId: "c\(p)", requestId: requests["c\(p)"]?.id, sessionId: "s\(p)", edited: false))
        }
        gate.close()
    }

    func testARunningToolLearnsThatTheGateClosed() async throws {
        let gate = Gate()
        let steps = Recorder()
        try gate.registerTool(deleteSpec()) { (args: PathArgs, context: CallContext) -> String in
            await steps.add("closed: \(context.gate.isClosed())")
            for _ in 0..<1000 where !context.gate.isClosed() { await pause(ms: 5) }
            // Not interrupted (its task is not cancelled): it stops early and says so.
            await steps.add("closed: \(context.gate.isClosed()), cancelled: \(Task.isCancelled)")
            return "stopped early"
        }
        let sub = gate.subscribe()
        let pending = try gate.executeCancellable(call: makeCall())
        _ = try gate.approve(request: try await nextRequest(sub))
        for _ in 0..<500 {  // until the tool runs
            if await steps.items.count == 1 { break }
            await pause(ms: 5)
        }
        gate.close()
        let maybeResult = await pending.wait()
        let result = try XCTUnwrap(maybeResult)
        XCTAssertEqual(result.status, .executed)
        XCTAssertEqual(try result.output(as: String.self), "stopped early")
        let seen = await steps.items
        XCTAssertEqual(seen, ["closed: false", "closed: true, cancelled: false"])
    }

    // MARK: hostile input (JSON text is parsed by the core's strict parser; nothing runs)

    func testHostileArgumentsAreRefusedBeforeAnyoneIsAsked() async throws {
        let gate = Gate()
        let ran = Recorder()
        try gate.registerTool(ToolSpec(name: "delete_file"), executeJson: { json in
            await ran.add(json)
            return "\"ran\""
        })
        let sub = gate.subscribe()
        let farTooDeep: String = #"{"path":"# + nested(20_000) + "}"  // far past any stack
        let tooDeep: String = #"{"path":"# + nested(64) + "}"  // 65 levels with the object
        let hostile: [String] = [
            farTooDeep,
            tooDeep,
            #"{"path":"/tmp/x","path":"/etc/passwd"}"#,  // which one would run?
            #"{"a":{"b":1,"b":2}}"#,
            #"{"n":NaN}"#,
            #"{"n":Infinity}"#,
            #"{"n":-Infinity}"#,
            #"{"n":1e999}"#,
            #"{"path":"/tmp/x"} {"path":"/etc"}"#,
        ]
        for text in hostile {
            let call = ToolCall(tool: "delete_file", argumentsJson: text)
            XCTAssertThrowsKind(.malformed) { try gate.confirmCancellable(call: call) }
            XCTAssertThrowsKind(.malformed) { try gate.executeCancellable(call: call) }
            XCTAssertThrowsKind(.malformed) { try gate.evaluate(call: call) }
            XCTAssertThrowsKind(.malformed) {
                try gate.executeBatchCancellable(calls: [makeCall("delete_file", #"{"path":"/ok"}"#), call])
            }
            await XCTAssertThrowsKindAsync(.malformed) { try await gate.confirm(call) }
            await XCTAssertThrowsKindAsync(.malformed) { try await gate.execute(call) }
        }
        do {
            let repeated = ToolCall(tool: "delete_file", argumentsJson: #"{"path":"/a","path":"/b"}"#)
            _ = try gate.confirmCancellable(call: repeated)
            XCTFail("a repeated key was accepted")
        } catch let error as SignoffError {
            XCTAssertEqual(error.kind(), .malformed)
            XCTAssertTrue(error.message.contains("duplicate key"), error.message)
        }
        XCTAssertThrowsKind(.malformed) {
            try gate.confirmCancellable(call: ToolCall(tool: "delete_file", metadataJson: #"{"k":1,"k":2}"#))
        }
        XCTAssertThrowsKind(.malformed) {
            try gate.confirmCancellable(call: ToolCall(tool: "delete_file", metadataJson: nested(65)))
        }
        // exactly 64 levels is fine
        let atTheLimit: String = #"{"path":"# + nested(63) + "}"
        let evaluation = try gate.evaluate(call: ToolCall(tool: "delete_file", argumentsJson: atTheLimit))
        XCTAssertTrue(evaluation.required)
        let items = await ran.items
        XCTAssertEqual(items, [])
        XCTAssertEqual(gate.pendingCount(), 0)
        let quiet = await noEvent(sub)
        XCTAssertTrue(quiet, "nobody is asked about a refused call")
    }

    func testHostileResponsesAndEditsLeaveTheRequestPending() async throws {
        let gate = Gate()
        let ran = Recorder()
        try gate.registerTool(deleteSpec(editable: true)) { (args: PathArgs) -> String in
            await ran.add(args.path)
            return args.path
        }
        let sub = gate.subscribe()
        let pending = try gate.executeCancellable(call: makeCall("delete_file", #"{"path":"/tmp/x"}"#))
        let request = try await nextRequest(sub)
        let id = request.id
        let deepResponse: String =
            #"{"id":"\#(id)","decision":"approve","arguments":{"path":"# + nested(20_000, #""x""#) + "}}"
        let responses: [String] = [
            #"{"id":"\#(id)","decision":"deny","decision":"approve"}"#,
            #"{"id":"\#(id)","decision":"approve","arguments":{"path":"/a","path":"/etc/passwd"}}"#,
            #"{"id":"\#(id)","decision":"approve","arguments":{"path":NaN}}"#,
            deepResponse,
        ]
        for body in responses {
            XCTAssertThrowsKind(.malformed) { try gate.respondJson(json: body) }
            XCTAssertThrowsKind(.malformed) { try responseFromJson(json: body) }
        }
        let tooDeep: String = #"{"path":"# + nested(64) + "}"
        let farTooDeep: String = #"{"path":"# + nested(20_000) + "}"
        let edits: [String] = [
            #"{"path":"/a","path":"/etc/passwd"}"#, #"{"path":NaN}"#, #"{"path":Infinity}"#, tooDeep, farTooDeep,
        ]
        for text in edits {
            XCTAssertThrowsKind(.malformed) { try gate.approve(request: request, argumentsJson: text) }
            var response = try approveResponse(request: request)
            response.argumentsJson = text
            XCTAssertThrowsKind(.malformed) { try gate.respond(response: response) }
        }
        XCTAssertEqual(gate.pendingCount(), 1)
        // a request the app hands back with tampered arguments text is refused too
        var tampered = request
        tampered.argumentsJson = #"{"path":"/tmp/x","path":"/etc"}"#
        XCTAssertThrowsKind(.malformed) { try gate.approve(request: tampered) }
        XCTAssertThrowsKind(.malformed) { try gate.deny(request: tampered) }
        XCTAssertEqual(gate.pendingCount(), 1)
        let before = await ran.items
        XCTAssertEqual(before, [])
        // the request is untouched: the original arguments run once approved
        XCTAssertEqual(try gate.approve(request: request), .approved)
        let maybeResult = await pending.wait()
        let result = try XCTUnwrap(maybeResult)
        XCTAssertEqual(result.status, .executed)
        XCTAssertFalse(result.edited)
        let after = await ran.items
        XCTAssertEqual(after, ["/tmp/x"])
    }

    final class EditsHostile: ApprovalHandler {
        let errors = Recorder()
        func handle(request: PendingRequest) async throws {
            let farTooDeep: String = #"{"path":"# + nested(20_000) + "}"
            let edits: [String] = [#"{"path":"/a","path":"/etc/passwd"}"#, #"{"path":NaN}"#, farTooDeep]
            for text in edits {
                do {
                    _ = try request.approveWith(argumentsJson: text)
                } catch let error as SignoffError {
                    await errors.add(error.kindName)
                }
            }
            _ = try request.deny(reason: "refused the edits")
        }
    }

    func testHostileEditsFromAHandlerAreMalformed() async throws {
        let gate = Gate()
        let ran = Recorder()
        try gate.registerTool(deleteSpec(editable: true), executeJson: { json in
            await ran.add(json)
            return "\"ran\""
        })
        let handler = EditsHostile()
        let registration = gate.onRequest(handler: handler)
        let result = try await gate.execute(makeCall())
        let errors = await handler.errors.items
        XCTAssertEqual(errors, ["malformed", "malformed", "malformed"])
        XCTAssertEqual(result.status, .denied)
        let items = await ran.items
        XCTAssertEqual(items, [])
        registration.stop()
    }

    func testHostileToolDefinitionsAndEvents() throws {
        let gate = Gate()
        do {
            try gate.registerTool(spec: ToolSpec(name: "x", parametersJson: #"{"type":"object","type":"string"}"#))
            XCTFail("a repeated key was accepted")
        } catch let error as SignoffError {
            XCTAssertEqual(error.kind(), .invalidTool)
            XCTAssertTrue(error.message.contains("duplicate key"), error.message)
        }
        XCTAssertThrowsKind(.invalidTool) {
            try gate.registerTool(spec: ToolSpec(name: "x", rules: [.oneOf(pointer: "/a", valuesJson: "[1,NaN]")]))
        }
        XCTAssertThrowsKind(.invalidTool) {
            try gate.registerTool(spec: ToolSpec(name: "x", rules: [.oneOf(pointer: "/a", valuesJson: nested(66))]))
        }
        XCTAssertThrowsKind(.malformed) { try gate.registerToolJson(json: #"{"name":"x","name":"y"}"#) }
        XCTAssertThrowsKind(.malformed) {
            try toolSpecFromJson(json: #"{"name":"x","approval":"required","approval":"not_required"}"#)
        }
        let id = UUID().uuidString.lowercased()
        let repeatedOutcome = #"{"type":"confirmation-resolved","id":"\#(id)","tool":"t","session_id":"s","#
            + #""scope":"once","edited":false,"at_ms":5,"outcome":"denied","outcome":"approved"}"#
        XCTAssertThrowsKind(.malformed) { try eventFromJson(json: repeatedOutcome) }
        XCTAssertEqual(gate.tools(), [])
    }

    // MARK: tool specs and conversions

    func testToolSpecRoundTripAndRules() throws {
        let gate = Gate()
        let spec = ToolSpec(
            name: "transfer_funds",
            description: "Moves money",
            parametersJson: #"{"type":"object"}"#,
            approval: .notRequired,
            promptTemplate: "Send {args}?",
            source: .external(server: "bank"),
            timeoutMs: 5000,
            rules: [
                .greaterThan(pointer: "/amount", value: 100),
                .oneOf(pointer: "/to", valuesJson: #"["boss@x"]"#),
                .notOneOf(pointer: "/currency", valuesJson: #"["EUR","USD"]"#),
                .contains(pointer: "/memo", substring: "urgent"),
                .pathOutside(pointer: "/receipt", prefixes: ["/tmp"]),
            ]
        )
        try gate.registerTool(spec: spec)
        XCTAssertEqual(gate.tools(), [spec])
        let specJson = try XCTUnwrap(json(try toolSpecToJson(spec: spec)))
        XCTAssertEqual(specJson["approval"] as? String, "not_required")
        XCTAssertEqual(try toolSpecFromJson(json: try toolSpecToJson(spec: spec)), spec)
        let ok = #"{"amount":5,"to":"me@x","currency":"EUR","memo":"lunch","receipt":"/tmp/r.pdf"}"#
        let quiet = try gate.evaluate(call: makeCall("transfer_funds", ok))
        XCTAssertFalse(quiet.required)
        let loud = #"{"amount":500,"to":"me@x","currency":"EUR","memo":"URGENT pls","receipt":"/tmp/r.pdf"}"#
        let evaluation = try gate.evaluate(call: makeCall("transfer_funds", loud))
        XCTAssertTrue(evaluation.required)
        XCTAssertTrue(evaluation.forcedByRule)
        XCTAssertEqual(evaluation.reasons.count, 2)
        XCTAssertThrowsKind(.invalidTool) {
            try gate.registerTool(spec: ToolSpec(name: "y", rules: [.oneOf(pointer: "/a", valuesJson: "{}")]))
        }
        XCTAssertTrue(gate.unregisterTool(name: "transfer_funds"))
        XCTAssertEqual(gate.tools(), [])
    }

    func testOneConfigurationPathCheckedByTheCore() throws {
        // Gate() cannot fail; every option goes through Gate.open(config:), which the core checks.
        // A bus capacity of 4e9 would make the core's builder allocate billions of slots: refused.
        for bad: UInt64 in [4_000_000_000, 0, UInt64.max] {
            XCTAssertThrowsKind(.config) { try Gate.open(config: GateConfig(busCapacity: bad)) }
        }
        XCTAssertThrowsKind(.config) { try Gate.open(config: GateConfig(defaultTimeoutMs: 0)) }
        do {
            _ = try Gate.open(config: GateConfig(busCapacity: 4_000_000_000))
            XCTFail("expected SignoffError.Config")
        } catch let error as SignoffError {
            XCTAssertTrue(error.message.contains("busCapacity"), error.message)
        }
        XCTAssertFalse(try Gate.open(config: GateConfig(busCapacity: 1)).isClosed())
        XCTAssertEqual(Gate().approverCount(), 0)
    }

    func testDefaultsMatchTheCore() throws {
        let gate = Gate()
        try gate.registerTool(spec: ToolSpec(name: "x"))
        let spec = try XCTUnwrap(gate.tools().first)
        XCTAssertEqual(json(spec.parametersJson ?? ""), ["type": "object"])
        XCTAssertEqual(spec.approval, .default)
        XCTAssertEqual(spec.source, .builtIn)
        let call = ToolCall(tool: "x")
        XCTAssertEqual(call.argumentsJson, "{}")
        XCTAssertEqual(call.sessionId, "default")
        XCTAssertTrue(GateConfig().denyWhenUnobserved)
        XCTAssertFalse(gate.gatingDisabled())
        XCTAssertTrue(try Gate.open(config: GateConfig(dangerouslyDisableGating: true)).gatingDisabled())
        let encoded = try ToolCall(tool: "x", arguments: ["path": "/tmp"])
        XCTAssertEqual(encoded.argumentsJson, #"{"path":"/tmp"}"#)
        // A value JSON cannot hold is malformed, as in every language (not an EncodingError).
        XCTAssertThrowsKind(.malformed) { try ToolCall(tool: "x", arguments: ["amount": Double.nan]) }
    }

    func testEventJsonRoundTrip() throws {
        let id = UUID().uuidString.lowercased()
        let text = #"{"type":"confirmation-resolved","id":"\#(id)","tool":"t","session_id":"s","outcome":"cancelled","cancel_reason":"aborted","scope":"once","edited":false,"at_ms":5}"#
        let event = try eventFromJson(json: text)
        guard case .resolved(let resolved) = event else { return XCTFail("\(event)") }
        XCTAssertEqual(resolved.cancelReason, .aborted)
        XCTAssertEqual(json(try eventToJson(event: event)), json(text))
        XCTAssertThrowsKind(.malformed) { try eventFromJson(json: #"{"type":"nope"}"#) }
        for badId in ["nope", "", id + "x"] {  // an event made up with an id that is no UUID
            var bad = resolved
            bad.id = badId
            XCTAssertThrowsKind(.malformed) { try eventToJson(event: .resolved(resolved: bad)) }
            let timeout = ConfirmationTimeout(id: badId, tool: "t", sessionId: "s", deadlineMs: 1, atMs: 2)
            XCTAssertThrowsKind(.malformed) { try eventToJson(event: .timeout(timeout: timeout)) }
        }
        XCTAssertThrowsKind(.malformed) { try eventToJson(event: .lagged(missed: 1, pending: [])) }
        XCTAssertThrowsKind(.malformed) { try eventToJson(event: .lagged(missed: 1, pending: [], more: "5-\(id)")) }
        let failedText = text.replacingOccurrences(
            of: #""cancel_reason":"aborted""#,
            with: #""cancel_reason":"approval-failed""#
        )
        let failed = try eventFromJson(json: failedText)
        guard case .resolved(let failedResolved) = failed else { return XCTFail("\(failed)") }
        XCTAssertEqual(failedResolved.cancelReason, .approvalFailed)
        XCTAssertEqual(json(try eventToJson(event: failed)), json(failedText))
    }
}
