// Hand-written Swift API on top of the generated bindings (Signoff.swift, do not edit that one).
//
// What this file adds:
// - `Gate.confirm(_:)`, `execute(_:)`, `executeBatch(_:)`: async, and cancelling the calling
//   Task cancels the confirmation (which denies). uniffi does not propagate Swift cancellation
//   into Rust, so these wait on the native `Pending*` handle inside `withTaskCancellationHandler`
//   and call its `cancel()`; they wait with a continuation that the process's one
//   `SettledSink` resumes by token (`whenSettledToken`), so no Rust future and no listener
//   object is kept per call while it waits.
// - `Gate.events()` / `Subscription.events()`: the request stream as an `AsyncStream`;
//   terminating the stream (consumer task cancelled, loop exited, stream released) closes the
//   subscription.
// - Closure-based handlers and executors (told which call they run: `CallContext`), Codable
//   conveniences, error descriptions.

import Foundation

// MARK: - Confirm, execute, cancellation

extension Gate {
    /// Asks for approval when `call` needs it and waits for the decision.
    ///
    /// Returns at once when the call needs no approval (`.approved(by: .notGated, ...)`).
    /// Otherwise a `.request` event is published and this waits until a person answers, the
    /// deadline passes, the gate closes, every approver goes away, or the calling task is
    /// cancelled; every one of those except an explicit approval is a decision not to run.
    /// Cancelling the task returns `.cancelled(requestId: nil, reason: .aborted)` (unless a
    /// decision had already been made) and the request resolves as cancelled for everyone.
    ///
    /// - Throws: `SignoffError` when the call is refused before anyone is asked
    ///   (`.UnknownTool`, `.InvalidArguments`, `.Malformed` for arguments that are not JSON).
    public func confirm(_ call: ToolCall) async throws -> Decision {
        let pending = try confirmCancellable(call: call)
        return try await withTaskCancellationHandler {
            // Resumed by the library when the decision is in: no Rust future and no listener
            // object is kept per pending call (see `PendingConfirmation.whenSettledToken`).
            await untilSettled(
                token: { try pending.whenSettledToken(sink: $0, token: $1) },
                listener: { pending.whenSettled(listener: $0) }
            )
            return try pending.settledDecision()
        } onCancel: {
            pending.cancel()
        }
    }

    /// `confirm(_:)` with `Encodable` arguments.
    public func confirm<Arguments: Encodable>(
        tool: String,
        arguments: Arguments,
        sessionId: String = "default",
        callId: String? = nil
    ) async throws -> Decision {
        try await confirm(ToolCall(tool: tool, arguments: arguments, sessionId: sessionId, callId: callId))
    }

    /// Confirms `call` and, if approved, runs the tool's executor exactly once. Refusals,
    /// denials, timeouts and tool failures are `ToolResult`s (`status`, and `content` for the
    /// model), not errors.
    ///
    /// Cancelling the calling task, the same in every language: while the call waits for a
    /// decision, its request is cancelled (`.aborted`) and the tool never runs; once the tool
    /// has started, the tool is not interrupted: it runs to the end and its result is recorded
    /// (audit `execution`, store `done`); only this caller does not receive it.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled before the result is in;
    ///   `SignoffError.Malformed` for arguments that are not JSON.
    public func execute(_ call: ToolCall) async throws -> ToolResult {
        let pending = try executeCancellable(call: call)
        let result = await withTaskCancellationHandler {
            await untilSettled(
                token: { try pending.whenSettledToken(sink: $0, token: $1) },
                listener: { pending.whenSettled(listener: $0) }
            )
            return pending.result()
        } onCancel: {
            pending.cancel()
        }
        guard let result else { throw CancellationError() }
        return result
    }

    /// Runs a batch of calls from one model turn concurrently; results come back in the order of
    /// `calls`, each with its call id. Cancelling the calling task cancels every call as
    /// `execute(_:)` describes.
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled before the results are in.
    public func executeBatch(_ calls: [ToolCall]) async throws -> [ToolResult] {
        let pending = try executeBatchCancellable(calls: calls)
        let results = await withTaskCancellationHandler {
            await untilSettled(
                token: { try pending.whenSettledToken(sink: $0, token: $1) },
                listener: { pending.whenSettled(listener: $0) }
            )
            return pending.results()
        } onCancel: {
            pending.cancel()
        }
        guard let results else { throw CancellationError() }
        return results
    }
}

// MARK: - Event stream

extension Subscription {
    /// This subscription's events as an `AsyncStream`. The stream ends when the subscription is
    /// closed, and after the gate closes (once the events published before are delivered);
    /// terminating the stream (breaking out of the loop, cancelling the consuming task, releasing
    /// the stream) closes the subscription. Iterate it once.
    public func events(
        bufferingPolicy: AsyncStream<GateEvent>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<GateEvent> {
        AsyncStream(bufferingPolicy: bufferingPolicy) { continuation in
            // `next()` does not observe Swift cancellation; `close()` ends it (it returns nil).
            let pump = Task.detached { [self] in
                while let event = await self.next() {
                    if case .terminated = continuation.yield(event) { break }
                }
                continuation.finish()
            }
            continuation.onTermination = { [self] _ in
                pump.cancel()
                self.close()
            }
        }
    }
}

extension Gate {
    /// Subscribes now and returns the events as an `AsyncStream` (see `Subscription.events()`).
    /// The subscription exists from this call on, so a request published right after is seen.
    ///
    /// ```swift
    /// for await event in gate.events() {
    ///     if case .request(let request) = event { show(request) }
    /// }
    /// ```
    public func events(
        bufferingPolicy: AsyncStream<GateEvent>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<GateEvent> {
        subscribe().events(bufferingPolicy: bufferingPolicy)
    }

    /// `events()` with only the events of `types` (and `.lagged`, which reports missed events of
    /// any type), e.g. `gate.events(only: [.request, .resolved])`.
    public func events(
        only types: [EventType],
        bufferingPolicy: AsyncStream<GateEvent>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<GateEvent> {
        subscribeOnly(types: types).events(bufferingPolicy: bufferingPolicy)
    }

    /// Only the confirmation requests, as an `AsyncStream`. After a lag, every request still
    /// pending is delivered again, the lagged event's snapshot and then the rest a page at a time
    /// (`pendingPage(after:limit:)` from its `more`): de-duplicate by `id` if you keep state.
    public func requests() -> AsyncStream<ConfirmationRequest> {
        let events = self.events(only: [.request])
        return AsyncStream { continuation in
            // Weak: the stream must not keep the gate alive (it ends when the gate is gone).
            let pump = Task.detached { [weak self] in
                for await event in events {
                    switch event {
                    case .request(let request):
                        continuation.yield(request)
                    case .lagged(_, let pending, let more):
                        for request in pending { continuation.yield(request) }
                        var after = more
                        while let cursor = after, !Task.isCancelled,
                              let page = try? self?.pendingPage(after: cursor, limit: 1000) {
                            for request in page.requests { continuation.yield(request) }
                            after = page.next
                        }
                    default:
                        break
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in pump.cancel() }
        }
    }
}

/// Suspends until a pending call has settled: through the process's one `SettledSink` and a
/// token (`token(sinkId, token)` hands it to the call), or, if that sink could not be
/// registered, with a `SettledListener` of its own (`listener`).
func untilSettled(
    token: (UInt32, UInt64) throws -> Void,
    listener: (SettledListener) -> Void
) async {
    guard let settlements = Settlements.shared else {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            listener(OnSettled { continuation.resume() })
        }
        return
    }
    await settlements.wait(token)
}

/// The extension's `SettledSink`: one per process, registered on first use, resuming each
/// waiting call's continuation by its token. A waiting call costs one table entry here (an
/// `UnsafeContinuation` is a pointer, nothing allocated) and nothing on the Rust side.
final class Settlements: SettledSink, @unchecked Sendable {
    /// nil when the library refused the registration (it allows 64 sinks per process).
    static let shared: Settlements? = {
        let settlements = Settlements()
        guard let id = try? registerSettledSink(sink: settlements) else { return nil }
        settlements.sinkId = id
        return settlements
    }()

    private let lock = NSLock()
    /// Set once, before `shared` is returned to anyone.
    private var sinkId: UInt32 = 0
    private var nextToken: UInt64 = 0
    private var waiting: [UInt64: UnsafeContinuation<Void, Never>] = [:]

    private init() {}

    /// Suspends until `settled(token:)` is called with the token handed to `start`. A `start`
    /// that throws (not expected: the sink is registered) resumes at once; the caller then finds
    /// the call unsettled and reports it.
    func wait(_ start: (UInt32, UInt64) throws -> Void) async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            lock.lock()
            nextToken &+= 1
            let token = nextToken
            waiting[token] = continuation
            lock.unlock()
            do {
                try start(sinkId, token)
            } catch {
                settled(token: token)
            }
        }
    }

    /// From the library, once per token (or at once, from `whenSettledToken`, when the call has
    /// already settled).
    func settled(token: UInt64) {
        lock.lock()
        let continuation = waiting.removeValue(forKey: token)
        lock.unlock()
        continuation?.resume()
    }
}

/// A `SettledListener` from a closure: called once, from a thread of the library's.
public final class OnSettled: SettledListener {
    private let body: @Sendable () -> Void

    public init(_ body: @escaping @Sendable () -> Void) {
        self.body = body
    }

    public func settled() {
        body()
    }
}

extension PendingConfirmation {
    /// The decision of a confirmation that has settled (its `whenSettled` listener was called).
    func settledDecision() throws -> Decision {
        guard let decision = try decision() else {
            throw SignoffError.Closed(message: "the confirmation has not settled")
        }
        return decision
    }
}

// MARK: - Handlers and executors as closures

/// An `ApprovalHandler` from a closure.
public final class ClosureApprovalHandler: ApprovalHandler {
    private let body: @Sendable (PendingRequest) async throws -> Void

    public init(_ body: @escaping @Sendable (PendingRequest) async throws -> Void) {
        self.body = body
    }

    public func handle(request: PendingRequest) async throws {
        try await body(request)
    }
}

/// A `ToolExecutor` from a closure over JSON text, optionally told which call it runs.
public final class ClosureToolExecutor: ToolExecutor {
    private let body: @Sendable (String, CallContext) async throws -> String

    /// `body` receives the arguments' JSON text and the call's context (tool, call id, the
    /// request a person answered, session, `edited`, and `gate.isClosed()`).
    public init(_ body: @escaping @Sendable (String, CallContext) async throws -> String) {
        self.body = body
    }

    public convenience init(_ body: @escaping @Sendable (String) async throws -> String) {
        self.init { json, _ in try await body(json) }
    }

    public func execute(argumentsJson: String, context: CallContext) async throws -> String {
        try await body(argumentsJson, context)
    }
}

extension Gate {
    /// Calls `body` for every confirmation request (and every request already pending), each
    /// concurrently. Answer through the `PendingRequest`; returning without answering, or
    /// throwing, ends the request at once as cancelled (`CancelReason.approvalFailed`): the tool
    /// does not run, and the model is told the approval step failed, never the error's text. Keep
    /// the returned registration: releasing it (or calling `stop()`) unregisters the handler.
    public func onRequest(
        _ body: @escaping @Sendable (PendingRequest) async throws -> Void
    ) -> HandlerRegistration {
        onRequest(handler: ClosureApprovalHandler(body))
    }

    /// Registers a tool whose executor takes and returns JSON text.
    public func registerTool(
        _ spec: ToolSpec,
        executeJson: @escaping @Sendable (String) async throws -> String
    ) throws {
        try registerExecutableTool(spec: spec, executor: ClosureToolExecutor(executeJson))
    }

    /// Registers a tool whose executor takes and returns JSON text, and is told which call it
    /// runs (`CallContext`).
    public func registerTool(
        _ spec: ToolSpec,
        executeJson: @escaping @Sendable (String, CallContext) async throws -> String
    ) throws {
        try registerExecutableTool(spec: spec, executor: ClosureToolExecutor(executeJson))
    }

    /// Registers a tool whose executor takes `Decodable` arguments and returns an `Encodable`
    /// output. Arguments that do not decode make the call fail (`ToolResult.status == .failed`).
    public func registerTool<Arguments: Decodable, Output: Encodable>(
        _ spec: ToolSpec,
        execute: @escaping @Sendable (Arguments) async throws -> Output
    ) throws {
        try registerTool(spec, execute: { (arguments: Arguments, _: CallContext) in try await execute(arguments) })
    }

    /// Registers a tool whose executor takes `Decodable` arguments and the call's context
    /// (`CallContext`: tool, call id, the request a person answered, session, `edited`, and
    /// `gate.isClosed()`), and returns an `Encodable` output.
    ///
    /// ```swift
    /// try gate.registerTool(spec) { (args: Invoice, context: CallContext) -> String in
    ///     log("sending for request \(context.requestId ?? "none") in \(context.sessionId)")
    ///     return try await send(args)
    /// }
    /// ```
    public func registerTool<Arguments: Decodable, Output: Encodable>(
        _ spec: ToolSpec,
        execute: @escaping @Sendable (Arguments, CallContext) async throws -> Output
    ) throws {
        try registerTool(spec, executeJson: { (json: String, context: CallContext) in
            let arguments = try SignoffJSON.decode(Arguments.self, from: json)
            return try SignoffJSON.encode(try await execute(arguments, context))
        })
    }
}

// MARK: - Codable conveniences

/// JSON text <-> Codable values, as the FFI passes JSON values as text.
public enum SignoffJSON {
    /// The JSON text of `value`. A value JSON cannot hold (NaN, an infinity) is
    /// `SignoffError.Malformed`, as in every language, not Foundation's `EncodingError`.
    public static func encode<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            return String(decoding: try encoder.encode(value), as: UTF8.self)
        } catch let error as EncodingError {
            throw SignoffError.Malformed(message: "malformed payload: the value is not JSON: \(error)")
        }
    }

    public static func decode<T: Decodable>(_ type: T.Type, from json: String) throws -> T {
        try JSONDecoder().decode(type, from: Data(json.utf8))
    }
}

extension ToolCall {
    /// A call with `Encodable` arguments (usually a struct or `[String: String]`).
    public init<Arguments: Encodable>(
        tool: String,
        arguments: Arguments,
        sessionId: String = "default",
        callId: String? = nil
    ) throws {
        self.init(
            tool: tool,
            argumentsJson: try SignoffJSON.encode(arguments),
            sessionId: sessionId,
            callId: callId,
            metadataJson: nil
        )
    }
}

extension ConfirmationRequest {
    /// The arguments that will run if approved unchanged, decoded. Show `displayArguments`
    /// and `prompt` to the person, not a rendering of these.
    public func arguments<T: Decodable>(as type: T.Type = T.self) throws -> T {
        try SignoffJSON.decode(type, from: argumentsJson)
    }
}

extension Decision {
    /// The arguments to run with, when approved (the original ones or the person's edit).
    public var argumentsJson: String? {
        if case .approved(_, let arguments, _, _, _, _) = self { return arguments }
        return nil
    }

    /// The arguments to run with, decoded, when approved.
    public func arguments<T: Decodable>(as type: T.Type = T.self) throws -> T? {
        guard let json = argumentsJson else { return nil }
        return try SignoffJSON.decode(type, from: json)
    }
}

extension ToolResult {
    /// The tool's output, decoded, when it ran and succeeded.
    public func output<T: Decodable>(as type: T.Type = T.self) throws -> T? {
        guard let json = outputJson else { return nil }
        return try SignoffJSON.decode(type, from: json)
    }
}

extension PendingRequest {
    /// Approves with edited `Encodable` arguments (the tool must be editable; they are checked
    /// against its schema).
    @discardableResult
    public func approve<Arguments: Encodable>(
        editedArguments: Arguments,
        scope: Scope? = nil,
        responder: String? = nil
    ) throws -> Outcome {
        try approveWith(argumentsJson: try SignoffJSON.encode(editedArguments), scope: scope, responder: responder)
    }
}

// MARK: - Errors

extension SignoffError {
    /// The core's human-readable message.
    public var message: String {
        switch self {
        case .UnknownTool(let m), .InvalidTool(let m), .InvalidArguments(let m), .UnknownRequest(let m),
             .AlreadyResolved(let m), .Expired(let m), .EditsNotAllowed(let m), .Mismatch(let m),
             .Malformed(let m), .Unauthorized(let m), .Closed(let m), .Store(let m), .NoExecutor(let m),
             .BadSignature(let m), .UnknownKey(let m), .TokenExpired(let m), .WrongApprover(let m),
             .AlreadyUsed(let m), .NotPending(let m), .Config(let m), .Io(let m):
            return m
        }
    }

    /// The stable snake_case kind, e.g. `"already_resolved"` (as in the shared test vectors).
    public var kindName: String { errorKindName(kind: kind()) }
}

extension SignoffError: LocalizedError {
    public var errorDescription: String? { message }
}

extension CallbackError: LocalizedError {
    public var errorDescription: String? {
        switch self {
        case .Failed(let message): return message
        }
    }
}

extension ErrorKind {
    /// The stable snake_case name, e.g. `"already_resolved"`.
    public var name: String { errorKindName(kind: self) }
}

extension EventType {
    /// The type an event's `type` names, e.g. `EventType(named: "confirmation-request")` for
    /// `.request` (names read from configuration, as the other languages spell them). Throws
    /// `SignoffError.Malformed` for any other name (`"lagged"` too: every subscription is told of
    /// a lag whatever its types).
    public init(named name: String) throws {
        self = try eventTypeNamed(name: name)
    }
}

// MARK: - Sendable before Swift 6

// The generated file declares these conformances only for Swift 6 compilers; declare them for
// Swift 5.9 / 5.10 too (every field is itself Sendable: a value type, or `CallContext.gate`, a
// `GateStatus`, whose generated class is `@unchecked Sendable`).
#if !compiler(>=6)
extension CallContext: Sendable {}
extension ChainHead: Sendable {}
extension ChainProblem: Sendable {}
extension ChainReport: Sendable {}
extension ConfirmationRequest: Sendable {}
extension ConfirmationResolved: Sendable {}
extension ConfirmationResponse: Sendable {}
extension ConfirmationTimeout: Sendable {}
extension ConsoleOptions: Sendable {}
extension Evaluation: Sendable {}
extension GateConfig: Sendable {}
extension MarkerClaims: Sendable {}
extension NotRestored: Sendable {}
extension PendingPage: Sendable {}
extension Recovery: Sendable {}
extension StoredRecord: Sendable {}
extension TokenClaims: Sendable {}
extension ToolCall: Sendable {}
extension ToolResult: Sendable {}
extension ToolSpec: Sendable {}
extension ApprovalMode: Sendable {}
extension ApprovedBy: Sendable {}
extension ArgRule: Sendable {}
extension CancelReason: Sendable {}
extension ChainProblemKind: Sendable {}
extension Decision: Sendable {}
extension ErrorKind: Sendable {}
extension EventType: Sendable {}
extension GateEvent: Sendable {}
extension Outcome: Sendable {}
extension RecordState: Sendable {}
extension ResponseDecision: Sendable {}
extension Scope: Sendable {}
extension ToolSource: Sendable {}
extension ToolStatus: Sendable {}
#endif
