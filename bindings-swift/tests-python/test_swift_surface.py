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
    (r"public convenience init\(\) \{", "Gate()"),
    (r"open func approverCount\(\) -> UInt64", "tests"),
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
    (r"open func whenSettled\(listener: SettledListener\)", "untilSettled (fallback), tests"),
    (r"open func whenSettledToken\(sink: UInt32, token: UInt64\)throws", "Gate.confirm, Gate.execute, Gate.executeBatch"),
    (r"public func registerSettledSink\(sink: SettledSink\)throws\s+-> UInt32", "Settlements.shared"),
    (r"open func decision\(\)throws\s+-> Decision\?", "PendingConfirmation.settledDecision"),
    (r"open func result\(\) -> ToolResult\?", "Gate.execute"),
    (r"open func results\(\) -> \[ToolResult\]\?", "Gate.executeBatch"),
    (r"open func next\(\)async\s+-> GateEvent\?", "Subscription.events"),
    (r"open func close\(\)", "Subscription.events"),
    (r"open func approveWith\(argumentsJson: String\? = nil, scope: Scope\? = nil, responder: String\? = nil\)throws\s+-> Outcome", "PendingRequest.approve(editedArguments:)"),
    # foreign traits
    (r"public protocol ApprovalHandler: AnyObject, Sendable \{\s+func handle\(request: PendingRequest\) async throws", "ClosureApprovalHandler"),
    (r"public protocol SettledListener: AnyObject, Sendable \{\s+func settled\(\)", "OnSettled"),
    (r"public protocol SettledSink: AnyObject, Sendable \{\s+func settled\(token: UInt64\)", "Settlements"),
    (r"public protocol ToolExecutor: AnyObject, Sendable \{\s+func execute\(argumentsJson: String, context: CallContext\) async throws\s+-> String", "ClosureToolExecutor"),
    (r"public struct CallContext \{[^}]*public var tool: String\n[^}]*public var callId: String\?\n[^}]*"
     r"public var requestId: String\?\n[^}]*public var sessionId: String\n[^}]*public var edited: Bool\n[^}]*"
     r"public var gate: GateStatus\n", "ClosureToolExecutor, Gate.registerTool(_:execute:), tests"),
    (r"open class GateStatus: GateStatusProtocol, @unchecked Sendable", "CallContext.gate, Sendable fallback"),
    (r"open func isClosed\(\) -> Bool", "CallContext.gate.isClosed()"),
    # records and enums
    (r"public struct ToolCall: ", "ToolCall(tool:arguments:)"),
    (r"\*/tool: String,\s+/\*\*[^/]*\*/argumentsJson: String = \"\{\}\",\s+/\*\*[^/]*\*/sessionId: String = \"default\",\s+/\*\*[^/]*\*/callId: String\? = nil,\s+/\*\*[^/]*\*/metadataJson: String\? = nil\)", "ToolCall(tool:arguments:)"),
    (r"public var argumentsJson: String\n", "ConfirmationRequest.arguments(as:)"),
    (r"public var outputJson: String\?", "ToolResult.output(as:)"),
    (r"case approved\(requestId: String\?, argumentsJson: String, edited: Bool, by: ApprovedBy, scope: Scope, responder: String\?", "Decision.argumentsJson"),
    (r"case denied\(requestId: String, reason: String\?, responder: String\?", "tests"),
    (r"case timedOut\(requestId: String, timeoutMs: UInt64", "tests"),
    (r"case cancelled\(requestId: String\?, reason: CancelReason", "Gate.confirm docs, tests"),
    # the core's Decision accessors
    (r"public func isApproved\(\) -> Bool", "tests"),
    (r"public func outcome\(\) -> Outcome", "tests"),
    (r"public func requestId\(\) -> String\?", "tests"),
    (r"public func responder\(\) -> String\?", "tests"),
    (r"public func reason\(\) -> String\?", "tests"),
    (r"public func cancelReason\(\) -> CancelReason\?", "tests"),
    (r"public func scope\(\) -> Scope", "tests"),
    (r"public func approvedBy\(\) -> ApprovedBy\?", "tests"),
    (r"public func edited\(\) -> Bool", "tests"),
    (r"public func timeoutMs\(\) -> UInt64\?", "tests"),
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
    # remote approval, durable store, audit (README, RemoteTests.swift, SignoffCrashHelper)
    (r"public static func `open`\(config: GateConfig = GateConfig\(\), keys: TokenKeys\? = nil\)throws\s+-> Gate", "Gate.open"),
    (r"open func observe\(\) -> Subscription", "vectors (observer)"),
    (r"open func issueToken\(requestId: String, approver: String\)throws\s+-> String", "tests, helper"),
    (r"open func inspectToken\(token: String\)throws\s+-> TokenClaims", "tests"),
    (r"open func respondToken\(token: String, approver: String, decision: ResponseDecision, argumentsJson: String\? = nil, scope: Scope\? = nil, reason: String\? = nil\)throws\s+-> Outcome", "tests, helper"),
    (r"open func record\(requestId: String\)throws\s+-> StoredRecord\?", "tests"),
    (r"open func recover\(\)throws\s+-> Recovery", "tests, helper"),
    (r"open func flushAudit\(\)async\s", "tests"),
    (r"public func verifyAuditChain\(path: String, storePath: String\? = nil\)throws\s+-> ChainReport", "tests"),
    (r"open class Secret: SecretProtocol, @unchecked Sendable", "tests"),
    (r"public convenience init\(bytes: Data\)throws", "Secret(bytes:)"),
    (r"public static func fromBase64\(text: String\)throws\s+-> Secret", "tests"),
    (r"public static func generate\(\) -> Secret", "tests"),
    (r"open func toBase64\(\) -> String", "tests"),
    (r"open class TokenKeys: TokenKeysProtocol, @unchecked Sendable", "tests"),
    (r"public convenience init\(keyId: String, secret: Secret\)throws", "TokenKeys(keyId:secret:)"),
    (r"public static func parse\(text: String\)throws\s+-> TokenKeys", "tests, helper"),
    (r"public static func fromEnv\(name: String\)throws\s+-> TokenKeys", "tests"),
    (r"public static func fromFile\(path: String\)throws\s+-> TokenKeys", "tests"),
    (r"open func rotate\(keyId: String, secret: Secret\)throws\s+-> TokenKeys", "tests"),
    (r"open func withVerifyOnly\(keyId: String, secret: Secret\)throws\s+-> TokenKeys", "tests"),
    (r"open func currentKeyId\(\) -> String", "tests"),
    (r"open func keyIds\(\) -> \[String\]", "tests"),
    (r"public struct GateConfig: ", "Gate.open(config:)"),
    (r"public var defaultTimeoutMs: UInt64\?\n", "GateConfig"),
    (r"public var denyWhenUnobserved: Bool\n", "GateConfig"),
    (r"public var busCapacity: UInt64\?\n", "GateConfig"),
    (r"public var rememberResolved: UInt64\?\n", "GateConfig"),
    (r"public var approvers: \[String: \[String\]\]\?\n", "GateConfig"),
    (r"public var forbidSelfApproval: Bool\n", "GateConfig"),
    (r"public var storePath: String\?\n", "GateConfig"),
    (r"public var synchronousFull: Bool\n", "GateConfig"),
    (r"public var auditPath: String\?\n", "GateConfig"),
    (r"public var auditRotateBytes: UInt64\?\n", "GateConfig"),
    (r"public var tokenKeys: String\?\n", "GateConfig"),
    (r"public var tokenTtlMs: UInt64\?\n", "GateConfig"),
    (r"public var requestId: RequestId\n", "TokenClaims.requestId"),
    (r"public typealias RequestId = String\n", "TokenClaims.requestId == request.id"),
    (r"public var tokenFingerprint: String\?", "tests"),
    (r"public var toolResult: ToolResult\?", "tests"),
    (r"public var notRestored: \[NotRestored\]", "tests"),
    (r"public var anchor: ChainHead\?", "tests"),
    (r"public enum RecordState: Equatable, Hashable \{", "tests"),
    (r"public enum ChainProblemKind: Equatable, Hashable \{", "tests"),
]


# Gone, and must stay gone: the unvalidated configuration path and the old count's name.
REMOVED = [r"\bGateOptions\b", r"\bsubscriberCount\b"]


@pytest.mark.parametrize("pattern", REMOVED)
def test_removed_names_stay_removed(pattern):
    sources = [GENERATED, HANDWRITTEN, (HERE.parent / "README.md").read_text(encoding="utf-8")]
    sources += [p.read_text(encoding="utf-8") for p in (HERE.parent / "Tests").rglob("*.swift")]
    assert not any(re.search(pattern, text) for text in sources), pattern


@pytest.mark.parametrize("pattern,user", DECLARATIONS, ids=[u + ": " + p[:40] for p, u in DECLARATIONS])
def test_generated_swift_declares(pattern, user):
    assert re.search(pattern, GENERATED), f"Signoff.swift no longer declares what {user} uses: /{pattern}/"


def test_every_signoff_error_case_is_handled_in_message():
    cases = re.findall(r"^    case (\w+)\(message: String", GENERATED[GENERATED.index("enum SignoffError"):], re.M)
    cases = cases[: cases.index("Io") + 1]
    assert len(cases) == 21
    switch = HANDWRITTEN[HANDWRITTEN.index("public var message: String {"):]
    switch = switch[: switch.index("return m")]
    assert sorted(re.findall(r"\.(\w+)\(let m\)", switch)) == sorted(cases)


def test_sendable_fallback_lists_every_generated_value_type():
    generated = set(re.findall(r"^extension (\w+): Sendable \{\}", GENERATED, re.M))
    generated -= {"SignoffError", "CallbackError"}  # errors are Sendable through Swift.Error
    block = HANDWRITTEN[HANDWRITTEN.index("#if !compiler(>=6)"):]
    assert set(re.findall(r"^extension (\w+): Sendable \{\}", block, re.M)) == generated
