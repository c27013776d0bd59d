"""Without a Swift compiler: the generated Swift (Sources/Signoff/Signoff.swift, drift-checked by
test.sh against the built library) still declares every generated name the hand-written Swift
(Signoff+Swift.swift) and the XCTest suite use, with the labels they use. A rename on the Rust
side that would break the Swift layer fails here."""

import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GENERATED = (HERE.parent / "Sources" / "Signoff" / "Signoff.swift").read_text(encoding="utf-8")
HANDWRITTEN = (HERE.parent / "Sources" / "Signoff" / "Signoff+Swift.swift").read_text(encoding="utf-8")

# (declaration regex in the generated file, what uses it)
DECLARATIONS = [
    # objects and their methods
    (r"open class Gate: GateProtocol, @unchecked Sendable", "Gate"),
    (r"public convenience init\(options: GateOptions = GateOptions\(\)\)", "Gate(options:) / Gate()"),
    (r"open func confirmCancellable\(call: ToolCall\)throws\s+-> PendingConfirmation", "Gate.confirm"),
    (r"open func executeCancellable\(call: ToolCall\)throws\s+-> PendingExecution", "Gate.execute"),
    (r"open func executeBatchCancellable\(calls: \[ToolCall\]\)throws\s+-> PendingBatch", "Gate.executeBatch"),
    (r"open func subscribe\(\) -> Subscription", "Gate.events"),
    (r"open func onRequest\(handler: ApprovalHandler\) -> HandlerRegistration", "Gate.onRequest"),
    (r"open func registerExecutableTool\(spec: ToolSpec, executor: ToolExecutor\)throws", "Gate.registerTool"),
    (r"open func registerTool\(spec: ToolSpec\)throws", "tests"),
    (r"open func approve\(request: ConfirmationRequest, argumentsJson: String\? = nil, scope: Scope\? = nil, responder: String\? = nil\)throws\s+-> Outcome", "README, tests"),
    (r"open func deny\(request: ConfirmationRequest, reason: String\? = nil, responder: String\? = nil\)throws\s+-> Outcome", "README, tests"),
    (r"open func pending\(\) -> \[ConfirmationRequest\]", "README"),
    (r"open class PendingConfirmation: PendingConfirmationProtocol, @unchecked Sendable", "Gate.confirm"),
    (r"open func wait\(\)async throws\s+-> Decision", "PendingConfirmation.wait"),
    (r"open func wait\(\)async\s+-> ToolResult\?", "PendingExecution.wait"),
    (r"open func wait\(\)async\s+-> \[ToolResult\]\?", "PendingBatch.wait"),
    (r"open func cancel\(\)", "Pending*.cancel"),
    (r"open func next\(\)async\s+-> GateEvent\?", "Subscription.events"),
    (r"open func close\(\)", "Subscription.events"),
    (r"open func approveWith\(argumentsJson: String\? = nil, scope: Scope\? = nil, responder: String\? = nil\)throws\s+-> Outcome", "PendingRequest.approve(editedArguments:)"),
    # foreign traits
    (r"public protocol ApprovalHandler: AnyObject, Sendable \{\s+func handle\(request: PendingRequest\) async throws", "ClosureApprovalHandler"),
    (r"public protocol ToolExecutor: AnyObject, Sendable \{\s+func execute\(argumentsJson: String\) async throws\s+-> String", "ClosureToolExecutor"),
    # records and enums
    (r"public struct ToolCall: ", "ToolCall(tool:arguments:)"),
    (r"\*/tool: String,\s+/\*\*[^/]*\*/argumentsJson: String = \"\{\}\",\s+/\*\*[^/]*\*/sessionId: String = \"default\",\s+/\*\*[^/]*\*/callId: String\? = nil,\s+/\*\*[^/]*\*/metadataJson: String\? = nil\)", "ToolCall(tool:arguments:)"),
    (r"public var argumentsJson: String\n", "ConfirmationRequest.arguments(as:)"),
    (r"public var outputJson: String\?", "ToolResult.output(as:)"),
    (r"case approved\(requestId: String\?, argumentsJson: String, edited: Bool, by: ApprovedBy, scope: Scope, responder: String\?", "Decision.argumentsJson"),
    (r"case denied\(requestId: String, reason: String\?, responder: String\?", "tests"),
    (r"case timedOut\(requestId: String, timeoutMs: UInt64", "tests"),
    (r"case cancelled\(requestId: String\?, reason: CancelReason", "Gate.confirm docs, tests"),
    (r"case request\(request: ConfirmationRequest", "Gate.requests"),
    (r"case lagged\(missed: UInt64, pending: \[ConfirmationRequest\],\s+/\*\*[^/]*\*/more: String\? = nil", "Gate.requests"),
    (r"open func pendingPage\(after: String\? = nil, limit: UInt32 = UInt32\(1000\)\)throws\s+-> PendingPage", "Gate.requests, README"),
    (r"public struct PendingPage: ", "Gate.requests"),
    (r"case approvalFailed\n", "VectorsTests.cancelName"),
    (r"case resolved\(resolved: ConfirmationResolved", "tests"),
    (r"enum SignoffError: Swift\.Error, Equatable, Hashable \{", "SignoffError: LocalizedError (not generated)"),
    (r"enum CallbackError: Swift\.Error, Equatable, Hashable \{", "CallbackError: LocalizedError (not generated)"),
    (r"public func kind\(\) -> ErrorKind", "SignoffError.kindName"),
    (r"public func errorKindName\(kind: ErrorKind\) -> String", "ErrorKind.name"),
    (r"public func approveResponse\(request: ConfirmationRequest\)throws\s+-> ConfirmationResponse", "tests"),
    (r"public func eventToJson\(event: GateEvent\)throws\s+-> String", "vectors"),
    (r"public func toolSpecFromJson\(json: String\)throws\s+-> ToolSpec", "vectors"),
]


@pytest.mark.parametrize("pattern,user", DECLARATIONS, ids=[u + ": " + p[:40] for p, u in DECLARATIONS])
def test_generated_swift_declares(pattern, user):
    assert re.search(pattern, GENERATED), f"Signoff.swift no longer declares what {user} uses: /{pattern}/"


def test_every_signoff_error_case_is_handled_in_message():
    cases = re.findall(r"^    case (\w+)\(message: String", GENERATED[GENERATED.index("enum SignoffError"):], re.M)
    cases = cases[: cases.index("Config") + 1]
    assert len(cases) == 20
    switch = HANDWRITTEN[HANDWRITTEN.index("public var message: String {"):]
    switch = switch[: switch.index("return m")]
    assert sorted(re.findall(r"\.(\w+)\(let m\)", switch)) == sorted(cases)


def test_sendable_fallback_lists_every_generated_value_type():
    generated = set(re.findall(r"^extension (\w+): Sendable \{\}", GENERATED, re.M))
    generated -= {"SignoffError", "CallbackError"}  # errors are Sendable through Swift.Error
    block = HANDWRITTEN[HANDWRITTEN.index("#if !compiler(>=6)"):]
    assert set(re.findall(r"^extension (\w+): Sendable \{\}", block, re.M)) == generated
