import Foundation
import XCTest
import Signoff

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

let pathSchema = #"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}"#

func deleteSpec(editable: Bool = false, timeoutMs: UInt64? = nil) -> ToolSpec {
    ToolSpec(
        name: "delete_file",
        description: "Deletes a file",
        parametersJson: pathSchema,
        editable: editable,
        timeoutMs: timeoutMs
    )
}

func makeCall(
    _ tool: String = "delete_file",
    _ argumentsJson: String = #"{"path":"/tmp/x"}"#,
    sessionId: String = "default",
    callId: String? = nil
) -> ToolCall {
    ToolCall(tool: tool, argumentsJson: argumentsJson, sessionId: sessionId, callId: callId)
}

/// A gate with `delete_file` registered: `Gate()`, or `Gate.open(config:)` when given a config.
func gateWithDelete(_ config: GateConfig? = nil) throws -> Gate {
    let gate = try config.map { try Gate.open(config: $0) } ?? Gate()
    try gate.registerTool(spec: deleteSpec())
    return gate
}

/// The next event. `Subscription.next()` does not observe task cancellation, so the timeout
/// closes the subscription (which ends `next()` with nil).
func nextEvent(_ sub: Subscription, seconds: Double = 5) async throws -> GateEvent {
    let timer = Task {
        try? await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
        if !Task.isCancelled { sub.close() }
    }
    defer { timer.cancel() }
    guard let event = await sub.next() else { throw TimedOut(what: "an event") }
    return event
}

func nextRequest(_ sub: Subscription) async throws -> ConfirmationRequest {
    while true {
        if case .request(let request) = try await nextEvent(sub) { return request }
    }
}

/// Events after the request, up to and including this request's resolved event.
func eventsUntilResolved(_ sub: Subscription, _ id: String) async throws -> [GateEvent] {
    var seen: [GateEvent] = []
    while true {
        let event = try await nextEvent(sub)
        seen.append(event)
        if case .resolved(let resolved) = event, resolved.id == id { return seen }
    }
}

func resolvedEvent(_ sub: Subscription, _ id: String) async throws -> ConfirmationResolved {
    guard case .resolved(let resolved)? = try await eventsUntilResolved(sub, id).last else {
        throw TimedOut(what: "the resolved event")
    }
    return resolved
}

func kind(_ event: GateEvent) -> String {
    switch event {
    case .request: return "request"
    case .response: return "response"
    case .timeout: return "timeout"
    case .resolved: return "resolved"
    case .lagged: return "lagged"
    }
}

/// True when no event arrives within `seconds` (closes the subscription either way).
func noEvent(_ sub: Subscription, seconds: Double = 0.2) async -> Bool {
    do {
        _ = try await nextEvent(sub, seconds: seconds)
        return false
    } catch {
        return true
    }
}

func pause(ms: UInt64) async {
    try? await Task.sleep(nanoseconds: ms * 1_000_000)
}

func waitUntil(_ condition: () -> Bool, seconds: Double = 2) async {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() && Date() < deadline { await pause(ms: 10) }
}

/// `levels` nested JSON arrays around `inner`, e.g. `nested(2)` is `[[1]]`.
func nested(_ levels: Int, _ inner: String = "1") -> String {
    String(repeating: "[", count: levels) + inner + String(repeating: "]", count: levels)
}

func json(_ text: String) -> NSDictionary? {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? NSDictionary
}

/// Canonical JSON text of a JSON value (sorted keys), for comparisons.
func canonical(_ value: Any) -> String {
    guard let data = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed]) else {
        return "<not JSON: \(value)>"
    }
    return String(decoding: data, as: UTF8.self)
}

func XCTAssertThrowsKind<T>(
    _ kind: ErrorKind,
    _ body: () throws -> T,
    file: StaticString = #filePath,
    line: UInt = #line
) {
    do {
        _ = try body()
        XCTFail("expected SignoffError \(kind.name)", file: file, line: line)
    } catch let error as SignoffError {
        XCTAssertEqual(error.kind(), kind, error.message, file: file, line: line)
    } catch {
        XCTFail("unexpected error \(error)", file: file, line: line)
    }
}

func XCTAssertThrowsKindAsync<T>(
    _ kind: ErrorKind,
    _ body: () async throws -> T,
    file: StaticString = #filePath,
    line: UInt = #line
) async {
    do {
        _ = try await body()
        XCTFail("expected SignoffError \(kind.name)", file: file, line: line)
    } catch let error as SignoffError {
        XCTAssertEqual(error.kind(), kind, error.message, file: file, line: line)
    } catch {
        XCTFail("unexpected error \(error)", file: file, line: line)
    }
}

/// Counts calls made from any thread (a `SettledListener`'s `settled()`).
final class CallCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() {
        lock.lock()
        count += 1
        lock.unlock()
    }
    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }
}

/// Records the tokens a `SettledSink` is told, from any thread.
final class TokenLog: SettledSink, @unchecked Sendable {
    private let lock = NSLock()
    private var told: [UInt64] = []
    func settled(token: UInt64) {
        lock.lock()
        told.append(token)
        lock.unlock()
    }
    var tokens: [UInt64] {
        lock.lock()
        defer { lock.unlock() }
        return told
    }
}

/// Thread-safe record of what handlers and executors saw.
actor Recorder {
    private(set) var items: [String] = []
    func add(_ item: String) { items.append(item) }
}
