// Remote approval (signed tokens), approvers, the durable store and recovery after a killed
// process, and the hash-chained audit log. Mirrors bindings-swift/tests-python/test_remote.py
// (the same cases over the same C ABI on machines without Swift); run with `swift test` on a Mac
// after ./build-xcframework.sh. The killed-process tests run SignoffCrashHelper (an executable
// target of this package) in a child process, on macOS only.

import CryptoKit
import Foundation
import XCTest
import Signoff

let secretA = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
let secretB = "ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A="
let nilRequestId = "00000000-0000-4000-8000-000000000000"

struct PathArgs: Codable, Sendable { let path: String }

func tokenKeys(_ keyId: String = "k1", _ secret: String = secretA) throws -> TokenKeys {
    try TokenKeys(keyId: keyId, secret: try Secret.fromBase64(text: secret))
}

/// A gate with token keys (`keys`, or k1 with secret A) whose `delete_file` records each run in
/// `recorder`. By default it keeps requests pending with nobody subscribed.
func remoteGate(
    _ recorder: Recorder,
    config: GateConfig = GateConfig(denyWhenUnobserved: false),
    keys: TokenKeys? = nil
) throws -> Gate {
    let gate = try Gate.open(config: config, keys: try keys ?? tokenKeys())
    try gate.registerTool(deleteSpec(editable: true)) { (args: PathArgs) -> [String: String] in
        await recorder.add(args.path)
        return ["deleted": args.path]
    }
    return gate
}

/// Starts `execute(delete_file(path))`; returns its handle (keep it: releasing it cancels the
/// call) and its pending request.
func pendingCall(
    _ gate: Gate,
    _ path: String = "/tmp/a",
    sessionId: String = "default",
    callId: String? = nil
) async throws -> (PendingExecution, ConfirmationRequest) {
    let before = Set(gate.pending().map(\.id))
    let handle = try gate.executeCancellable(
        call: makeCall("delete_file", #"{"path":"\#(path)"}"#, sessionId: sessionId, callId: callId)
    )
    for _ in 0..<500 {
        if let request = gate.pending().first(where: { !before.contains($0.id) }) { return (handle, request) }
        await pause(ms: 5)
    }
    throw TimedOut(what: "a pending request")
}

func base64URLDecode(_ text: String) -> Data? {
    var t = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while t.count % 4 != 0 { t += "=" }
    return Data(base64Encoded: t)
}

func base64URLEncode(_ data: Data) -> String {
    data.base64EncodedString()
        .replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

func sha256Hex(_ text: String) -> String {
    SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
}

func readLines(_ path: String) throws -> [String] {
    try String(contentsOfFile: path, encoding: .utf8).components(separatedBy: "\n").filter { !$0.isEmpty }
}

func writeLines(_ path: String, _ lines: [String]) throws {
    try (lines.map { $0 + "\n" }.joined()).write(toFile: path, atomically: false, encoding: .utf8)
}

/// Rewrites the log's last record (another `at_ms`, a recomputed hash): still a valid chain,
/// since nothing follows it, but not the record that was written.
func reforgeLastRecord(_ path: String) throws {
    var lines = try readLines(path)
    let last = lines.removeLast()
    guard let cut = last.range(of: #","hash":""#, options: .backwards) else { throw TimedOut(what: "a hash") }
    let body = String(last[..<cut.lowerBound])
        .replacingOccurrences(of: #""at_ms":\d+"#, with: #""at_ms":1"#, options: .regularExpression)
    lines.append(body + #","hash":""# + sha256Hex(body + "}") + #""}"#)
    try writeLines(path, lines)
}

extension XCTestCase {
    /// A fresh directory, removed when the test ends.
    func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("signoff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }
}

final class RemoteTests: XCTestCase {
    override func setUp() {
        super.setUp()
        executionTimeAllowance = 60
    }

    // MARK: answers off the calling thread

    func testRespondAsyncAndRespondTokenAsyncRecordADurableAnswerWithTheSameOutcomesAndErrors() async throws {
        let recorder = Recorder()
        let db = try temporaryDirectory().appendingPathComponent("signoff.db").path
        let gate = try remoteGate(
            recorder, config: GateConfig(denyWhenUnobserved: false, storePath: db, synchronousFull: true))
        defer { gate.close() }
        // A response answers; a wrong or a second one throws as `respond` throws.
        let (first, request) = try await pendingCall(gate, "/tmp/a")
        await XCTAssertThrowsKindAsync(.mismatch) {
            try await gate.respondAsync(
                response: ConfirmationResponse(
                    id: request.id, decision: .approve, scope: .once, argumentsDigest: "sha256:00"))
        }
        let approved = try await gate.respondAsync(
            response: ConfirmationResponse(id: request.id, decision: .approve, scope: .once, responder: "alice"))
        XCTAssertEqual(approved, .approved)
        let result = await first.wait()
        XCTAssertEqual(result?.status, .executed)
        XCTAssertEqual(try gate.record(requestId: request.id)?.state, .done)
        await XCTAssertThrowsKindAsync(.alreadyResolved) {
            try await gate.respondAsync(response: ConfirmationResponse(id: request.id, decision: .deny, scope: .once))
        }
        // A token answers once.
        let (second, other) = try await pendingCall(gate, "/tmp/b")
        let token = try gate.issueToken(requestId: other.id, approver: "bob")
        await XCTAssertThrowsKindAsync(.wrongApprover) {
            try await gate.respondTokenAsync(token: token, approver: "eve", decision: .approve)
        }
        let denied = try await gate.respondTokenAsync(token: token, approver: "bob", decision: .deny, reason: "no")
        XCTAssertEqual(denied, .denied)
        let deniedResult = await second.wait()
        XCTAssertEqual(deniedResult?.status, .denied)
        await XCTAssertThrowsKindAsync(.alreadyUsed) {
            try await gate.respondTokenAsync(token: token, approver: "bob", decision: .approve)
        }
        let runs = await recorder.items
        XCTAssertEqual(runs, ["/tmp/a"], "the denied call did not run")
    }

    // MARK: tokens

    func testATokenApprovalRunsTheStoredArgumentsExactlyOnce() async throws {
        let recorder = Recorder()
        let log = try temporaryDirectory().appendingPathComponent("audit.jsonl").path
        let gate = try remoteGate(recorder, config: GateConfig(denyWhenUnobserved: false, auditPath: log))
        let (handle, request) = try await pendingCall(gate, "/etc/passwd", callId: "c1")
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertTrue(token.hasPrefix("so1.k1."))

        let claims = try gate.inspectToken(token: token)
        XCTAssertEqual(claims.requestId, request.id)
        XCTAssertEqual(claims.approver, "alice")
        XCTAssertEqual(claims.tool, "delete_file")
        XCTAssertEqual(claims.keyId, "k1")
        XCTAssertEqual(claims.argumentsDigest, request.argumentsDigest)
        XCTAssertEqual(claims.sessionId, request.sessionId)
        XCTAssertEqual(claims.expiresAtMs, request.deadlineMs)  // expires with the request by default

        XCTAssertEqual(try gate.respondToken(token: token, approver: "alice", decision: .approve), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        XCTAssertEqual(result?.callId, "c1")
        guard case .approved(_, _, _, _, _, let responder)? = result?.decision else { return XCTFail("\(String(describing: result))") }
        XCTAssertEqual(responder, "alice")
        let runs = await recorder.items
        XCTAssertEqual(runs, ["/etc/passwd"])

        XCTAssertThrowsKind(.alreadyUsed) { try gate.respondToken(token: token, approver: "alice", decision: .approve) }
        let runsAfter = await recorder.items
        XCTAssertEqual(runsAfter, ["/etc/passwd"])

        await gate.flushAudit()
        gate.close()
        let text = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertFalse(text.contains(token), "a token must never be logged")
        XCTAssertTrue(text.contains(#""token-issued""#))
        XCTAssertTrue(text.contains(#""already_used""#))
    }

    func testATokenDenialCarriesTheReasonToTheModel() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder)
        let (handle, request) = try await pendingCall(gate)
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertEqual(try gate.respondToken(token: token, approver: "alice", decision: .deny, reason: "not today"), .denied)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .denied)
        XCTAssertTrue(result?.content.contains("not today") ?? false)
        let runs = await recorder.items
        XCTAssertEqual(runs, [])
        gate.close()
    }

    func testATokenWithAnEditRunsTheValidatedEdit() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder)
        let (handle, request) = try await pendingCall(gate, "/tmp/a")
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertThrowsKind(.invalidArguments) {
            try gate.respondToken(token: token, approver: "alice", decision: .approve, argumentsJson: #"{"path":1}"#)
        }
        XCTAssertThrowsKind(.malformed) {
            try gate.respondToken(token: token, approver: "alice", decision: .approve, argumentsJson: #"{"path":"/a","path":"/b"}"#)
        }
        XCTAssertEqual(gate.pendingCount(), 1)
        XCTAssertEqual(
            try gate.respondToken(token: token, approver: "alice", decision: .approve, argumentsJson: #"{"path":"/tmp/b"}"#, scope: .session),
            .approved
        )
        let result = await handle.wait()
        XCTAssertEqual(result?.edited, true)
        let runs = await recorder.items
        XCTAssertEqual(runs, ["/tmp/b"])
        XCTAssertEqual(gate.grants(sessionId: "default"), ["delete_file"])

        // A tool that does not allow edits refuses the edit, and the token stays usable.
        try gate.registerTool(ToolSpec(name: "delete_file", parametersJson: pathSchema, approval: .required)) { (args: PathArgs) -> String in
            await recorder.add(args.path)
            return "ok"
        }
        let (handle2, request2) = try await pendingCall(gate, "/tmp/c", sessionId: "s2")
        let token2 = try gate.issueToken(requestId: request2.id, approver: "alice")
        XCTAssertThrowsKind(.editsNotAllowed) {
            try gate.respondToken(token: token2, approver: "alice", decision: .approve, argumentsJson: #"{"path":"/tmp/d"}"#)
        }
        XCTAssertEqual(try gate.respondToken(token: token2, approver: "alice", decision: .approve), .approved)
        let result2 = await handle2.wait()
        XCTAssertEqual(result2?.status, .executed)
        let runs2 = await recorder.items
        XCTAssertEqual(runs2, ["/tmp/b", "/tmp/c"])
        gate.close()
    }

    func testAForgedTokenIsRejectedAndChangesNothing() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder)
        let (handle, request) = try await pendingCall(gate, "/a")
        let (other, otherRequest) = try await pendingCall(gate, "/b")
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        let parts = token.components(separatedBy: ".")
        XCTAssertEqual(parts.count, 4)
        let claims = try XCTUnwrap(
            try JSONSerialization.jsonObject(with: try XCTUnwrap(base64URLDecode(parts[2]))) as? [String: Any]
        )
        XCTAssertEqual(Set(claims.keys), ["rid", "tool", "dig", "sid", "apr", "iat", "exp"])
        let changes: [(String, Any)] = [
            ("rid", otherRequest.id),
            ("tool", "read_file"),
            ("dig", otherRequest.argumentsDigest),
            ("sid", "another-session"),
            ("apr", "mallory"),
            ("iat", 1),
            ("exp", 4_102_444_800_000),
        ]
        for (field, value) in changes {
            var forgedClaims = claims
            forgedClaims[field] = value
            let body = base64URLEncode(try JSONSerialization.data(withJSONObject: forgedClaims))
            let forged = [parts[0], parts[1], body, parts[3]].joined(separator: ".")
            let approver = field == "apr" ? "mallory" : "alice"
            XCTAssertThrowsKind(.badSignature) { try gate.respondToken(token: forged, approver: approver, decision: .approve) }
            XCTAssertThrowsKind(.badSignature) { try gate.inspectToken(token: forged) }
        }
        var signature = Array(parts[3])
        signature[3] = signature[3] == "A" ? "B" : "A"
        let flipped = [parts[0], parts[1], parts[2], String(signature)].joined(separator: ".")
        XCTAssertThrowsKind(.badSignature) { try gate.respondToken(token: flipped, approver: "alice", decision: .approve) }
        for junk in ["", "so1", "so1.k1.x", "so2.k1.e30.AAAA", token + ".x", String(repeating: "x", count: 10_000)] {
            XCTAssertThrowsKind(.malformed) { try gate.respondToken(token: junk, approver: "alice", decision: .approve) }
        }

        // Nothing above changed anything: the genuine token still works, once.
        let none = await recorder.items
        XCTAssertEqual(none, [])
        XCTAssertEqual(gate.pendingCount(), 2)
        XCTAssertEqual(try gate.respondToken(token: token, approver: "alice", decision: .approve), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        let runs = await recorder.items
        XCTAssertEqual(runs, ["/a"])
        gate.close()
        let otherResult = await other.wait()
        XCTAssertEqual(otherResult?.status, .cancelled)
    }

    func testAWrongApproverIsRefusedWithoutUsingUpTheToken() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder)
        let (handle, request) = try await pendingCall(gate)
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertThrowsKind(.wrongApprover) { try gate.respondToken(token: token, approver: "bob", decision: .approve) }
        XCTAssertEqual(gate.pendingCount(), 1)
        XCTAssertEqual(try gate.respondToken(token: token, approver: "alice", decision: .approve), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        let runs = await recorder.items
        XCTAssertEqual(runs.count, 1)
        gate.close()
    }

    func testAnExpiredTokenIsRefused() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder, config: GateConfig(denyWhenUnobserved: false, tokenTtlMs: 50))
        let (handle, request) = try await pendingCall(gate)
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        let claims = try gate.inspectToken(token: token)
        XCTAssertEqual(claims.expiresAtMs - claims.issuedAtMs, 50)
        await pause(ms: 150)
        XCTAssertThrowsKind(.tokenExpired) { try gate.respondToken(token: token, approver: "alice", decision: .approve) }
        XCTAssertEqual(gate.pendingCount(), 1)
        // A fresh token still answers the request.
        let fresh = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertEqual(try gate.respondToken(token: fresh, approver: "alice", decision: .deny), .denied)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .denied)
        let runs = await recorder.items
        XCTAssertEqual(runs, [])
        gate.close()
    }

    func testUnknownKeysAndRotation() async throws {
        let gate = try remoteGate(Recorder(), keys: try tokenKeys("k1", secretA))
        let (handle, request) = try await pendingCall(gate)
        let old = try gate.issueToken(requestId: request.id, approver: "alice")

        // After a rotation the old key still verifies what it signed; new tokens use the new key.
        let rotated = try tokenKeys("k1", secretA).rotate(keyId: "k2", secret: try Secret.fromBase64(text: secretB))
        XCTAssertEqual(rotated.currentKeyId(), "k2")
        XCTAssertEqual(rotated.keyIds(), ["k2", "k1"])
        let after = try Gate.open(keys: rotated)
        XCTAssertEqual(try after.inspectToken(token: old).keyId, "k1")
        // A gate holding only the new key does not know the old one.
        let onlyNew = try Gate.open(keys: try tokenKeys("k2", secretB))
        XCTAssertThrowsKind(.unknownKey) { try onlyNew.inspectToken(token: old) }
        XCTAssertThrowsKind(.unknownKey) { try onlyNew.respondToken(token: old, approver: "alice", decision: .approve) }
        // The same key id with another secret: a forgery.
        let impostor = try Gate.open(keys: try tokenKeys("k1", secretB))
        XCTAssertThrowsKind(.badSignature) { try impostor.inspectToken(token: old) }
        // A retired, verify-only key.
        let retired = try tokenKeys("k2", secretB).withVerifyOnly(keyId: "k1", secret: try Secret.fromBase64(text: secretA))
        XCTAssertEqual(retired.currentKeyId(), "k2")
        XCTAssertEqual(try Gate.open(keys: retired).inspectToken(token: old).requestId, request.id)

        XCTAssertEqual(try gate.respondToken(token: old, approver: "alice", decision: .approve), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        for g in [gate, after, onlyNew, impostor] { g.close() }
    }

    func testTokenErrorsWithoutKeysRequestOrGate() async throws {
        let plain = Gate()
        XCTAssertThrowsKind(.config) { try plain.issueToken(requestId: nilRequestId, approver: "alice") }
        XCTAssertThrowsKind(.config) { try plain.inspectToken(token: "so1.k1.e30.AAAA") }
        XCTAssertThrowsKind(.config) { try plain.respondToken(token: "so1.k1.e30.AAAA", approver: "alice", decision: .approve) }

        let gate = try remoteGate(Recorder())
        XCTAssertThrowsKind(.notPending) { try gate.issueToken(requestId: nilRequestId, approver: "alice") }
        XCTAssertThrowsKind(.unknownRequest) { try gate.issueToken(requestId: "not-a-uuid", approver: "alice") }
        let (handle, request) = try await pendingCall(gate)
        XCTAssertThrowsKind(.malformed) { try gate.issueToken(requestId: request.id, approver: "  ") }
        let token = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertEqual(try gate.deny(request: request, reason: "no"), .denied)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .denied)
        do {
            _ = try gate.respondToken(token: token, approver: "alice", decision: .approve)
            XCTFail("a token for a denied request was accepted")
        } catch let error as SignoffError {
            XCTAssertEqual(error.kind(), .notPending)
            XCTAssertTrue(error.message.contains("denied"), error.message)
        }
        XCTAssertThrowsKind(.notPending) { try gate.issueToken(requestId: request.id, approver: "alice") }
        gate.close()
        XCTAssertThrowsKind(.closed) { try gate.respondToken(token: token, approver: "alice", decision: .approve) }
    }

    func testKeysAndSecretsAreValidatedAndNeverEchoed() throws {
        let secret = try Secret.fromBase64(text: secretA)
        XCTAssertEqual(secret.toBase64(), secretA)
        XCTAssertEqual(try Secret(bytes: Data(0..<32)).toBase64(), secretA)
        XCTAssertEqual(Data(base64Encoded: Secret.generate().toBase64())?.count, 32)
        XCTAssertThrowsKind(.config) { try Secret(bytes: Data("too short".utf8)) }
        XCTAssertThrowsKind(.config) { try Secret.fromBase64(text: "not base64!") }
        XCTAssertThrowsKind(.config) { try TokenKeys(keyId: "bad.id", secret: secret) }
        XCTAssertThrowsKind(.config) { try tokenKeys("k1").withVerifyOnly(keyId: "k1", secret: secret) }

        let text = "k2:\(secretB)\n# the previous key\nk1:\(secretA)\n"
        XCTAssertEqual(try TokenKeys.parse(text: text).keyIds(), ["k2", "k1"])
        setenv("SIGNOFF_SWIFT_TEST_KEYS", text, 1)
        XCTAssertEqual(try TokenKeys.fromEnv(name: "SIGNOFF_SWIFT_TEST_KEYS").keyIds(), ["k2", "k1"])
        unsetenv("SIGNOFF_SWIFT_TEST_KEYS")
        XCTAssertThrowsKind(.config) { try TokenKeys.fromEnv(name: "SIGNOFF_SWIFT_TEST_KEYS") }
        let dir = try temporaryDirectory()
        let file = dir.appendingPathComponent("keys").path
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(try TokenKeys.fromFile(path: file).currentKeyId(), "k2")
        XCTAssertThrowsKind(.config) { try TokenKeys.fromFile(path: dir.appendingPathComponent("missing").path) }
        XCTAssertThrowsKind(.config) { try TokenKeys.parse(text: "") }

        let short = String(secretA.dropLast(8))  // a secret too short: the message must not echo it
        for bad in ["k1:\(short)", "k1:\(secretA),k1:\(secretB)"] {
            do {
                _ = try TokenKeys.parse(text: bad)
                XCTFail("accepted \(bad)")
            } catch let error as SignoffError {
                XCTAssertEqual(error.kind(), .config)
                XCTAssertFalse(error.message.contains(short) || error.message.contains(secretB), error.message)
            }
        }
    }

    /// `Gate.open(config:)` goes through the core's `GateConfig`: errors name the option as Swift
    /// spells it (VectorsTests.testConfig runs the shared config.json vectors too).
    func testTheConfigurationIsCheckedByTheCoreInSwiftsNames() throws {
        let dir = try temporaryDirectory()
        let missing = dir.appendingPathComponent("no/such/dir").path
        let cases: [(GateConfig, String)] = [
            (GateConfig(tokenTtlMs: 5), "tokenTtlMs"),
            (GateConfig(allowedResponders: ["alice"], approvers: ["*": ["bob"]]), "allowedResponders"),
            (GateConfig(allowedResponders: ["alice"], forbidSelfApproval: true), "forbidSelfApproval"),
            (GateConfig(auditRotateBytes: 4096), "auditRotateBytes"),
            (GateConfig(auditPath: dir.appendingPathComponent("a.jsonl").path, auditRotateBytes: 0), "auditRotateBytes"),
            (GateConfig(synchronousFull: true), "synchronousFull"),
            (GateConfig(busCapacity: 0), "busCapacity"),
            (GateConfig(busCapacity: 1_000_000_000), "busCapacity"),
            (GateConfig(defaultTimeoutMs: 0), "defaultTimeoutMs"),
            (GateConfig(defaultTimeoutMs: 31 * 24 * 3600 * 1000), "defaultTimeoutMs"),
            (GateConfig(rememberResolved: 1_000_000_000_000), "rememberResolved"),
            (GateConfig(tokenKeys: "not a key"), "tokenKeys"),
        ]
        for (config, name) in cases {
            do {
                try Gate.open(config: config).close()
                XCTFail("accepted \(config)")
            } catch let error as SignoffError {
                XCTAssertEqual(error.kind(), .config, error.message)
                XCTAssertTrue(error.message.contains(name), "\(name): \(error.message)")
            }
        }
        XCTAssertThrowsKind(.config) { try Gate.open(config: GateConfig(tokenKeys: "k1:\(secretA)"), keys: try tokenKeys()) }
        // A token lifetime with keys given as an object is fine; the keys are the object's.
        let gate = try Gate.open(config: GateConfig(tokenTtlMs: 5), keys: try tokenKeys("k9"))
        XCTAssertThrowsKind(.unknownKey) { try gate.inspectToken(token: "so1.placeholder.e30.AAAA") }
        gate.close()
        XCTAssertThrowsKind(.io) { try Gate.open(config: GateConfig(auditPath: missing + "/a.jsonl")) }
        XCTAssertThrowsKind(.store) { try Gate.open(config: GateConfig(storePath: missing + "/db")) }
        // Nothing was left open by the refusals: the same files open now.
        try Gate.open(config: GateConfig(
            storePath: dir.appendingPathComponent("db").path,
            auditPath: dir.appendingPathComponent("a").path
        )).close()
        // Every option at once, and nothing at all (Gate.open() is Gate()).
        try Gate.open(config: GateConfig(
            defaultTimeoutMs: 1000, keywords: ["delete"], denyWhenUnobserved: false, busCapacity: 16,
            rememberResolved: 0, approvers: ["delete_file": ["alice"], "*": ["root"]], forbidSelfApproval: true,
            storePath: dir.appendingPathComponent("all.db").path, synchronousFull: true,
            auditPath: dir.appendingPathComponent("all.jsonl").path, auditRotateBytes: 4096,
            tokenKeys: "k1:\(secretA)", tokenTtlMs: 1000
        )).close()
        let plain = try Gate.open()
        XCTAssertNil(try plain.record(requestId: nilRequestId))
        plain.close()
    }

    // MARK: approvers

    func testApproversRefuseUnlistedAndSelfApproval() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder, config: GateConfig(
            denyWhenUnobserved: false,
            approvers: ["delete_file": ["alice", "carol"], "*": ["admin"]],
            forbidSelfApproval: true
        ))

        let (handle, request) = try await pendingCall(gate, sessionId: "carol")
        let mallory = try gate.issueToken(requestId: request.id, approver: "mallory")
        XCTAssertThrowsKind(.unauthorized) { try gate.respondToken(token: mallory, approver: "mallory", decision: .approve) }
        XCTAssertThrowsKind(.unauthorized) { try gate.approve(request: request, responder: "mallory") }
        XCTAssertThrowsKind(.unauthorized) { try gate.approve(request: request) }  // an approval must name its approver
        let carol = try gate.issueToken(requestId: request.id, approver: "carol")
        XCTAssertThrowsKind(.unauthorized) { try gate.respondToken(token: carol, approver: "carol", decision: .approve) }
        XCTAssertEqual(gate.pendingCount(), 1)
        let alice = try gate.issueToken(requestId: request.id, approver: "alice")
        XCTAssertEqual(try gate.respondToken(token: alice, approver: "alice", decision: .approve), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)

        // admin may approve any tool; anyone may deny.
        let (handle2, request2) = try await pendingCall(gate)
        XCTAssertEqual(try gate.approve(request: request2, responder: "admin"), .approved)
        let result2 = await handle2.wait()
        XCTAssertEqual(result2?.status, .executed)
        let (handle3, request3) = try await pendingCall(gate)
        XCTAssertEqual(try gate.deny(request: request3, reason: "no", responder: "mallory"), .denied)
        let result3 = await handle3.wait()
        XCTAssertEqual(result3?.status, .denied)
        let runs = await recorder.items
        XCTAssertEqual(runs.count, 2)
        gate.close()

        // Only forbidSelfApproval: any named responder but the request's own session.
        let selfish = try remoteGate(recorder, config: GateConfig(denyWhenUnobserved: false, forbidSelfApproval: true))
        let (handle4, request4) = try await pendingCall(selfish, sessionId: "agent-7")
        XCTAssertThrowsKind(.unauthorized) { try selfish.approve(request: request4, responder: "agent-7") }
        XCTAssertEqual(try selfish.approve(request: request4, responder: "bob"), .approved)
        let result4 = await handle4.wait()
        XCTAssertEqual(result4?.status, .executed)
        selfish.close()
    }

    func testAnUnlistedHandlerApprovalIsRefusedAndFailsSafe() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder, config: GateConfig(approvers: ["*": ["alice"]]))
        let registration = gate.onRequest { pending in
            _ = try pending.approveWith(responder: "handler")  // not listed: throws, so approvalFailed
        }
        let result = try await gate.execute(makeCall())
        XCTAssertEqual(result.status, .cancelled)
        guard case .cancelled(_, let reason)? = result.decision else { return XCTFail("\(result)") }
        XCTAssertEqual(reason, .approvalFailed)
        let runs = await recorder.items
        XCTAssertEqual(runs, [])
        registration.stop()
        gate.close()
    }

    // MARK: the durable store

    func testRecordsAndRecoverRules() async throws {
        let memory = try remoteGate(Recorder())
        let (memoryHandle, memoryRequest) = try await pendingCall(memory)
        XCTAssertNil(try memory.record(requestId: memoryRequest.id))  // the in-memory store keeps no records
        XCTAssertThrowsKind(.unknownRequest) { try memory.record(requestId: "not-a-uuid") }
        _ = try memory.deny(request: memoryRequest)
        _ = await memoryHandle.wait()
        memory.close()

        let db = try temporaryDirectory().appendingPathComponent("signoff.db").path
        let gate = try remoteGate(Recorder(), config: GateConfig(denyWhenUnobserved: false, storePath: db, synchronousFull: true))
        let (handle, request) = try await pendingCall(gate)
        XCTAssertThrowsKind(.config) { try gate.recover() }  // after the first request
        let pending = try XCTUnwrap(try gate.record(requestId: request.id))
        XCTAssertEqual(pending.state, .pending)
        XCTAssertFalse(pending.isFinal)
        XCTAssertEqual(pending.request.id, request.id)
        XCTAssertNil(pending.toolResult)
        XCTAssertEqual(try gate.approve(request: request, responder: "alice"), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        let done = try XCTUnwrap(try gate.record(requestId: request.id))
        XCTAssertEqual(done.state, .done)
        XCTAssertTrue(done.isFinal)
        XCTAssertEqual(done.responder, "alice")
        XCTAssertEqual(json(done.argumentsJson ?? ""), ["path": "/tmp/a"])
        XCTAssertEqual(done.toolResult?.status, .executed)
        XCTAssertEqual(json(done.toolResult?.outputJson ?? ""), ["deleted": "/tmp/a"])
        XCTAssertNil(done.tokenFingerprint)

        // One gate per database: a second opener is refused until the first is closed.
        XCTAssertThrowsKind(.store) { try Gate.open(config: GateConfig(storePath: db)) }

        // A request pending when the gate is closed is cancelled by close(), so a restart does not
        // bring it back (only a process that dies leaves requests pending: see below).
        let (closedHandle, closedRequest) = try await pendingCall(gate, "/tmp/closed")
        gate.close()
        let closedResult = await closedHandle.wait()
        XCTAssertEqual(closedResult?.status, .cancelled)
        guard case .cancelled(_, let reason)? = closedResult?.decision else { return XCTFail() }
        XCTAssertEqual(reason, .shutdown)
        let again = try remoteGate(Recorder(), config: GateConfig(denyWhenUnobserved: false, storePath: db))
        let recovery = try again.recover()
        XCTAssertEqual(recovery, Recovery(restored: [], timedOut: [], interrupted: [], notRestored: []))
        XCTAssertEqual(try again.record(requestId: closedRequest.id)?.state, .cancelled)
        XCTAssertThrowsKind(.config) { try again.recover() }  // once per gate
        again.close()
    }

    // MARK: recovery after a killed process (macOS: a child process)

    #if os(macOS)
    /// Runs SignoffCrashHelper, which leaves requests in the store at `db` (`pending`: two pending
    /// requests; `hang`: one approved whose tool is running), then SIGKILLs it: no close(),
    /// nothing flushed. Returns the words of its first line (request id, token, other ids).
    func runHelperAndKill(db: String, count: String, mode: String) throws -> [String] {
        let helper = Bundle(for: RemoteTests.self).bundleURL.deletingLastPathComponent()
            .appendingPathComponent("SignoffCrashHelper")
        guard FileManager.default.isExecutableFile(atPath: helper.path) else {
            throw XCTSkip("SignoffCrashHelper is not built next to the test bundle (run `swift build` first)")
        }
        let process = Process()
        process.executableURL = helper
        process.arguments = [db, count, mode, "k1:\(secretA)"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let pid = process.processIdentifier
        // A helper that never prints is killed, which ends the reads below.
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 20, execute: watchdog)
        defer {
            watchdog.cancel()
            kill(pid, SIGKILL)  // no close(), nothing flushed: as a crash
            process.waitUntilExit()
        }
        var buffer = Data()
        func line() -> String? {
            while true {
                if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let text = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    return text
                }
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { return nil }
                buffer.append(chunk)
            }
        }
        guard let first = line() else { throw TimedOut(what: "the helper's request") }
        if mode == "hang" {
            XCTAssertEqual(line(), "EXECUTING")
        }
        return first.components(separatedBy: " ")
    }

    /// A gate on the store at `db` like the helper's, whose tools append each run to `count`.
    func countingGate(db: String, count: String, denyWhenUnobserved: Bool = false, keys: TokenKeys? = nil) throws -> Gate {
        let gate = try Gate.open(config: GateConfig(denyWhenUnobserved: denyWhenUnobserved, storePath: db), keys: keys)
        let append: @Sendable (String) -> Void = { path in
            let existing = (try? String(contentsOfFile: count, encoding: .utf8)) ?? ""
            try? (existing + path + "\n").write(toFile: count, atomically: false, encoding: .utf8)
        }
        try gate.registerTool(ToolSpec(name: "delete_file", parametersJson: pathSchema)) { (args: PathArgs) -> [String: String] in
            append(args.path)
            return ["deleted": args.path]
        }
        try gate.registerTool(ToolSpec(name: "send_email", approval: .required, timeoutMs: 500), executeJson: { _ in
            append("send_email")
            return #""sent""#
        })
        return gate
    }

    func testAPendingRequestSurvivesAKilledProcessAndRunsOnce() async throws {
        let dir = try temporaryDirectory()
        let (db, count) = (dir.appendingPathComponent("signoff.db").path, dir.appendingPathComponent("runs.txt").path)
        let words = try runHelperAndKill(db: db, count: count, mode: "pending")
        XCTAssertEqual(words.count, 3)
        let (rid, token, shortId) = (words[0], words[1], words[2])
        XCTAssertFalse(FileManager.default.fileExists(atPath: count))
        await pause(ms: 600)  // send_email's deadline passes while no process runs

        // A new process' gate, with the key rotated since: the old token still verifies.
        let rotated = try tokenKeys("k1", secretA).rotate(keyId: "k2", secret: try Secret.fromBase64(text: secretB))
        let gate = try countingGate(db: db, count: count, keys: rotated)
        let sub = gate.subscribe()
        let recovery = try gate.recover()
        XCTAssertEqual(recovery.restored.map(\.id), [rid])
        XCTAssertEqual(recovery.timedOut.map(\.id), [shortId])
        XCTAssertEqual(recovery.interrupted, [])
        XCTAssertEqual(recovery.notRestored, [])
        XCTAssertEqual(recovery.restored.first?.toolCallId, "c1")
        let republished = try await nextRequest(sub)  // published again
        XCTAssertEqual(republished.id, rid)
        XCTAssertThrowsKind(.config) { try gate.recover() }  // once per gate

        XCTAssertEqual(gate.pending().map(\.id), [rid])
        let stored = try XCTUnwrap(try gate.record(requestId: rid))
        XCTAssertEqual(stored.state, .pending)
        XCTAssertEqual(stored.request.tool, "delete_file")
        XCTAssertEqual(try gate.record(requestId: shortId)?.state, .timedOut)
        XCTAssertTrue(try gate.issueToken(requestId: rid, approver: "bob").hasPrefix("so1.k2."))
        XCTAssertEqual(try gate.inspectToken(token: token).keyId, "k1")

        XCTAssertEqual(try gate.respondToken(token: token, approver: "alice", decision: .approve), .approved)
        await waitUntil({ (try? gate.record(requestId: rid))?.state == .done }, seconds: 10)
        let done = try XCTUnwrap(try gate.record(requestId: rid))
        XCTAssertEqual(done.state, .done)
        XCTAssertEqual(done.responder, "alice")
        XCTAssertEqual(json(done.argumentsJson ?? ""), ["path": "/tmp/a"])
        XCTAssertEqual(done.toolResult?.status, .executed)
        XCTAssertEqual(done.toolResult?.callId, "c1")
        XCTAssertEqual(done.tokenFingerprint, sha256Hex(token))
        XCTAssertEqual(try readLines(count), ["/tmp/a"])
        XCTAssertThrowsKind(.alreadyUsed) { try gate.respondToken(token: token, approver: "alice", decision: .approve) }
        XCTAssertThrowsKind(.store) { try countingGate(db: db, count: count) }  // still open here
        sub.close()
        gate.close()

        // In yet another gate on the same file: nothing left to do, and the token is still spent.
        let again = try countingGate(db: db, count: count, keys: try tokenKeys())
        let nothing = try again.recover()
        XCTAssertEqual(nothing.restored, [])
        XCTAssertEqual(nothing.interrupted, [])
        XCTAssertThrowsKind(.alreadyUsed) { try again.respondToken(token: token, approver: "alice", decision: .approve) }
        XCTAssertEqual(try again.record(requestId: rid)?.state, .done)
        again.close()
        XCTAssertEqual(try readLines(count), ["/tmp/a"])
    }

    func testACallKilledWhileExecutingIsInterruptedAndNeverRerun() async throws {
        let dir = try temporaryDirectory()
        let (db, count) = (dir.appendingPathComponent("signoff.db").path, dir.appendingPathComponent("runs.txt").path)
        let words = try runHelperAndKill(db: db, count: count, mode: "hang")
        let (rid, token) = (words[0], words[1])
        XCTAssertEqual(try readLines(count), ["/tmp/a"])

        let gate = try countingGate(db: db, count: count, keys: try tokenKeys())
        let recovery = try gate.recover()
        XCTAssertEqual(recovery.restored, [])
        XCTAssertEqual(recovery.interrupted.map(\.request.id), [rid])
        XCTAssertEqual(recovery.interrupted.first?.state, .executing)  // as it was found
        XCTAssertEqual(recovery.interrupted.first?.responder, "alice")
        let record = try XCTUnwrap(try gate.record(requestId: rid))
        XCTAssertEqual(record.state, .interrupted)
        XCTAssertTrue(record.isFinal)
        XCTAssertEqual(json(record.resultJson ?? "")?["interrupted_in"] as? String, "executing")
        XCTAssertNil(record.toolResult)
        XCTAssertThrowsKind(.alreadyUsed) { try gate.respondToken(token: token, approver: "alice", decision: .approve) }
        XCTAssertThrowsKind(.notPending) { try gate.issueToken(requestId: rid, approver: "alice") }
        await pause(ms: 200)
        gate.close()
        XCTAssertEqual(try readLines(count), ["/tmp/a"])  // never run a second time
    }

    func testARestoredRequestFailsSafe() async throws {
        let dir = try temporaryDirectory()
        let count = dir.appendingPathComponent("runs.txt").path
        // Pending after a crash, but its tool is gone: cancelled, never run.
        let db = dir.appendingPathComponent("signoff.db").path
        let words = try runHelperAndKill(db: db, count: count, mode: "pending")
        let (rid, shortId) = (words[0], words[2])
        let gate = try Gate.open(config: GateConfig(denyWhenUnobserved: false, storePath: db))
        try gate.registerTool(spec: ToolSpec(name: "delete_file", parametersJson: pathSchema))  // no executor
        let recovery = try gate.recover()  // (send_email is not registered at all)
        XCTAssertEqual(recovery.restored, [])
        let reasons = Dictionary(uniqueKeysWithValues: recovery.notRestored.map { ($0.request.id, $0.reason) })
        XCTAssertEqual(Set(reasons.keys), [rid, shortId])
        XCTAssertTrue(reasons[rid]?.contains("no executor") ?? false, "\(reasons)")
        XCTAssertTrue(reasons[shortId]?.contains("send_email") ?? false, "\(reasons)")
        XCTAssertEqual(try gate.record(requestId: rid)?.state, .cancelled)
        XCTAssertEqual(gate.pendingCount(), 0)
        gate.close()

        // Restored with nobody subscribed on a gate that denies when unobserved: cancelled at once.
        let db2 = dir.appendingPathComponent("second.db").path
        let words2 = try runHelperAndKill(db: db2, count: count, mode: "pending")
        let strict = try countingGate(db: db2, count: count, denyWhenUnobserved: true)
        let restored = try strict.recover()
        XCTAssertEqual(Set(restored.restored.map(\.id)), [words2[0], words2[2]])
        XCTAssertEqual(strict.pendingCount(), 0)
        XCTAssertEqual(try strict.record(requestId: words2[0])?.state, .cancelled)
        strict.close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: count))
    }
    #endif

    // MARK: the audit chain

    /// A gate with an audit log (and `store`) whose handler approves every call.
    func auditedGate(_ log: String, rotateBytes: UInt64? = nil, storePath: String? = nil) throws -> (Gate, HandlerRegistration) {
        let gate = try Gate.open(config: GateConfig(storePath: storePath, auditPath: log, auditRotateBytes: rotateBytes))
        try gate.registerTool(deleteSpec()) { (args: PathArgs) -> String in "deleted \(args.path)" }
        let registration = gate.onRequest { pending in _ = try pending.approveWith(responder: "handler") }
        return (gate, registration)
    }

    func runCalls(_ gate: Gate, _ n: Int, prefix: String = "/tmp/") async throws {
        for i in 0..<n {
            let result = try await gate.execute(makeCall("delete_file", #"{"path":"\#(prefix)\#(i)"}"#))
            XCTAssertEqual(result.status, .executed, result.content)
        }
    }

    func testAuditChainVerifiesAndFindsEditsGapsAndJunk() async throws {
        let log = try temporaryDirectory().appendingPathComponent("audit.jsonl").path
        let (gate, registration) = try auditedGate(log)
        try await runCalls(gate, 3)
        await gate.flushAudit()
        XCTAssertGreaterThan(try readLines(log).count, 6)  // flushed while the gate is open
        registration.stop()
        gate.close()
        let lines = try readLines(log)
        let report = try verifyAuditChain(path: log)
        XCTAssertTrue(report.intact)
        XCTAssertNil(report.problem)
        XCTAssertNil(report.anchor)
        XCTAssertEqual(report.files, [log])
        XCTAssertEqual(report.records, UInt64(lines.count))
        XCTAssertEqual(report.head.count, 64)

        let n = try XCTUnwrap(lines.firstIndex { $0.contains(#""/tmp/1""#) })
        var edited = lines
        edited[n] = edited[n].replacingOccurrences(of: #""/tmp/1""#, with: #""/tmp/X""#)
        try writeLines(log, edited)
        let editedReport = try verifyAuditChain(path: log)
        XCTAssertFalse(editedReport.intact)
        XCTAssertEqual(editedReport.records, UInt64(n))
        let problem = try XCTUnwrap(editedReport.problem)
        XCTAssertEqual(problem.kind, .edited)
        XCTAssertEqual(problem.line, UInt64(n + 1))
        XCTAssertEqual(problem.seq, UInt64(n))
        XCTAssertEqual(problem.file, log)

        try writeLines(log, Array(lines[..<2]) + Array(lines[3...]))  // a deleted record
        XCTAssertEqual(try verifyAuditChain(path: log).problem?.kind, .missing)
        XCTAssertEqual(try verifyAuditChain(path: log).problem?.line, 3)
        try writeLines(log, [lines[0], lines[2], lines[1]] + Array(lines[3...]))  // two swapped
        XCTAssertEqual(try verifyAuditChain(path: log).problem?.kind, .reordered)
        try writeLines(log, Array(lines[..<2]) + ["not a record"] + Array(lines[2...]))
        XCTAssertEqual(try verifyAuditChain(path: log).problem?.kind, .malformed)

        XCTAssertThrowsKind(.io) { try verifyAuditChain(path: log + ".nope") }
    }

    func testAuditRotationKeepsOneChain() async throws {
        let log = try temporaryDirectory().appendingPathComponent("audit.jsonl").path
        let (gate, registration) = try auditedGate(log, rotateBytes: 2000)
        for i in 0..<8 {
            try await runCalls(gate, 1, prefix: "/tmp/\(i)-")
            await gate.flushAudit()
        }
        registration.stop()
        gate.close()
        // Re-opened (a restart): the chain continues.
        let (again, registration2) = try auditedGate(log, rotateBytes: 2000)
        try await runCalls(again, 1, prefix: "/tmp/again-")
        registration2.stop()
        again.close()
        let report = try verifyAuditChain(path: log)
        XCTAssertTrue(report.intact, "\(String(describing: report.problem))")
        XCTAssertGreaterThan(report.files.count, 2)
        XCTAssertEqual(report.files.first, log + ".1")
        XCTAssertEqual(report.files.last, log)
        try FileManager.default.removeItem(atPath: log + ".1")
        XCTAssertEqual(try verifyAuditChain(path: log).problem?.kind, .missing)
    }

    func testTheStoreAnchorsTheAuditChainSoACutEndIsFound() async throws {
        let dir = try temporaryDirectory()
        let (log, db) = (dir.appendingPathComponent("audit.jsonl").path, dir.appendingPathComponent("signoff.db").path)
        let (gate, registration) = try auditedGate(log, storePath: db)
        try await runCalls(gate, 3)
        registration.stop()
        gate.close()
        let whole = try String(contentsOfFile: log, encoding: .utf8)
        let lines = try readLines(log)
        let report = try verifyAuditChain(path: log, storePath: db)
        XCTAssertTrue(report.intact, "\(String(describing: report.problem))")
        XCTAssertEqual(report.records, UInt64(lines.count))
        XCTAssertEqual(report.anchor, ChainHead(seq: UInt64(lines.count - 1), hash: report.head))

        try writeLines(log, Array(lines.dropLast()))  // the last record cut
        XCTAssertTrue(try verifyAuditChain(path: log).intact)  // the documented limit without the store
        let cut = try verifyAuditChain(path: log, storePath: db)
        XCTAssertFalse(cut.intact)
        XCTAssertEqual(cut.problem?.kind, .truncated)
        XCTAssertEqual(cut.problem?.seq, UInt64(lines.count - 1))
        XCTAssertEqual(cut.problem?.file, log)

        try "".write(toFile: log, atomically: false, encoding: .utf8)  // every record cut
        XCTAssertEqual(try verifyAuditChain(path: log, storePath: db).problem?.kind, .truncated)
        XCTAssertEqual(try verifyAuditChain(path: log, storePath: db).problem?.seq, 0)

        try whole.write(toFile: log, atomically: false, encoding: .utf8)
        try reforgeLastRecord(log)
        XCTAssertTrue(try verifyAuditChain(path: log).intact)
        let forged = try verifyAuditChain(path: log, storePath: db)
        XCTAssertEqual(forged.problem?.kind, .edited)
        XCTAssertEqual(forged.problem?.seq, UInt64(lines.count - 1))
    }

    func testVerifyingAgainstTheWrongStoreOrARunningOne() async throws {
        let dir = try temporaryDirectory()
        let (log, db) = (dir.appendingPathComponent("audit.jsonl").path, dir.appendingPathComponent("signoff.db").path)
        XCTAssertThrowsKind(.io) { try verifyAuditChain(path: log, storePath: db) }  // no such database, as in every language
        let (gate, registration) = try auditedGate(log, storePath: db)
        try await runCalls(gate, 1)
        await gate.flushAudit()
        // A running gate holds its database locked: verify after it has closed.
        XCTAssertThrowsKind(.store) { try verifyAuditChain(path: log, storePath: db) }
        registration.stop()
        gate.close()
        XCTAssertTrue(try verifyAuditChain(path: log, storePath: db).intact)

        // Another gate's store anchors another chain: checked against it, this log is not it.
        let (otherLog, otherDb) = (dir.appendingPathComponent("other.jsonl").path, dir.appendingPathComponent("other.db").path)
        let (other, otherRegistration) = try auditedGate(otherLog, storePath: otherDb)
        try await runCalls(other, 3)
        otherRegistration.stop()
        other.close()
        let wrong = try verifyAuditChain(path: log, storePath: otherDb)
        XCTAssertFalse(wrong.intact)
        XCTAssertTrue(wrong.problem?.kind == .truncated || wrong.problem?.kind == .edited, "\(String(describing: wrong.problem))")
        // A store that never anchored anything (no audit log): the chain alone is checked.
        let plain = dir.appendingPathComponent("plain.db").path
        try Gate.open(config: GateConfig(storePath: plain)).close()
        let unanchored = try verifyAuditChain(path: log, storePath: plain)
        XCTAssertTrue(unanchored.intact)
        XCTAssertNil(unanchored.anchor)
        XCTAssertThrowsKind(.store) { try verifyAuditChain(path: log, storePath: log) }  // not a database
    }
}

// MARK: a shared PostgreSQL store (mirrors tests-python/test_postgres.py)

extension RemoteTests {
    /// SIGNOFF_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it); skipped without it, unless
    /// SIGNOFF_REQUIRE_POSTGRES is set.
    func postgresURL() throws -> String {
        let env = ProcessInfo.processInfo.environment
        if let url = env["SIGNOFF_TEST_POSTGRES_URL"], !url.isEmpty { return url }
        if env["SIGNOFF_REQUIRE_POSTGRES"] != nil {
            XCTFail("SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not")
        }
        throw XCTSkip("no SIGNOFF_TEST_POSTGRES_URL (run under scripts/with-postgres.sh)")
    }

    func testACallMadeThroughOneGateIsApprovedThroughAnotherAndRunsOnce() async throws {
        let url = try postgresURL()
        let schema = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let config = GateConfig(storeUrl: url, storeSchema: schema)
        let recorder = Recorder()
        // No approver is attached to the agent's gate: with a shared store it waits all the same.
        let agent = try remoteGate(recorder, config: config)
        let console = try Gate.open(config: config)
        try console.registerTool(spec: deleteSpec(editable: true))
        defer {
            agent.close()
            console.close()
        }

        let handle = try agent.executeCancellable(call: makeCall("delete_file", #"{"path":"/tmp/x"}"#, callId: "c1"))
        await waitUntil({ console.pending().count == 1 }, seconds: 10)
        guard let request = console.pending().first else { return XCTFail("the request is not listed") }
        XCTAssertEqual(request.tool, "delete_file")
        XCTAssertEqual(console.pendingCount(), 1)
        XCTAssertEqual(try console.record(requestId: request.id)?.state, .pending)

        let approve = ConfirmationResponse(id: request.id, decision: .approve, scope: .once, responder: "alice")
        XCTAssertEqual(try console.respond(response: approve), .approved)
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        let runs = await recorder.items
        XCTAssertEqual(runs, ["/tmp/x"])
        await waitUntil({ (try? console.record(requestId: request.id))?.state == .done }, seconds: 10)
        XCTAssertEqual(try console.record(requestId: request.id)?.responder, "alice")

        // A second answer, through either gate, is refused and changes nothing.
        XCTAssertThrowsKind(.alreadyResolved) {
            try console.respond(response: ConfirmationResponse(id: request.id, decision: .deny, scope: .once))
        }
        XCTAssertThrowsKind(.alreadyResolved) { try agent.respond(response: approve) }
        XCTAssertEqual(console.pending().count, 0)

        // A denial with a reason, made through the other gate, reaches the call.
        let (denied, second) = try await pendingCall(agent, "/etc")
        let deny = ConfirmationResponse(id: second.id, decision: .deny, scope: .once, reason: "not /etc")
        XCTAssertEqual(try console.respond(response: deny), .denied)
        let deniedResult = await denied.wait()
        XCTAssertEqual(deniedResult?.status, .denied)
        XCTAssertTrue(deniedResult?.content.contains("not /etc") ?? false)
        let runsAfter = await recorder.items
        XCTAssertEqual(runsAfter, ["/tmp/x"])
    }

    func testTheStoreOptionsAreCheckedInSwiftsNames() throws {
        let url = try postgresURL()
        let dir = try temporaryDirectory()
        let cases: [(GateConfig, [String])] = [
            (GateConfig(storePath: dir.appendingPathComponent("db").path, storeUrl: url), ["storeUrl", "storePath"]),
            (GateConfig(storeOwner: "agent-1"), ["storeOwner", "storeUrl"]),
            (GateConfig(storeSchema: "t_x"), ["storeSchema", "storeUrl"]),
            (GateConfig(storeUrl: "postgres://[not a host"), ["storeUrl"]),
            (GateConfig(storeUrl: url, storeSchema: "no-dashes; drop table x"), ["storeSchema"]),
        ]
        for (config, names) in cases {
            do {
                try Gate.open(config: config).close()
                XCTFail("accepted \(config)")
            } catch let error as SignoffError {
                XCTAssertEqual(error.kind(), .config, error.message)
                for name in names { XCTAssertTrue(error.message.contains(name), "\(name): \(error.message)") }
            }
        }
        XCTAssertThrowsKind(.store) { try Gate.open(config: GateConfig(storeUrl: "postgres://signoff@127.0.0.1:1/signoff")) }
    }

    // ---- approval markers (loopback de-duplication) ---------------------------------------------

    /// A person (alice) answers the next request on `gate`: approves (optionally with an edit) or denies.
    func decided(_ gate: Gate, deny: Bool = false, edit: String? = nil, path: String = "/tmp/a") async throws -> Decision {
        let registration = gate.onRequest { request in
            if deny {
                _ = try request.deny(reason: "no", responder: "alice")
            } else {
                _ = try request.approveWith(argumentsJson: edit, responder: "alice")
            }
        }
        defer { registration.stop() }
        return try await gate.confirm(makeCall("delete_file", #"{"path":"\#(path)"}"#))
    }

    func testAnApprovalMarkerIsAcceptedOnceByAGateSharingTheKeys() async throws {
        let local = try remoteGate(Recorder())
        let remote = try remoteGate(Recorder())
        let decision = try await decided(local)
        let marker = try local.approvalMarker(tool: "delete_file", decision: decision)
        XCTAssertTrue(marker.hasPrefix("so1m."))
        XCTAssertEqual(markerMetaKey(), "dev.signoff/approval")
        let claims = try remote.acceptApprovalMarker(marker: marker, tool: "delete_file", argumentsJson: #"{"path":"/tmp/a"}"#)
        XCTAssertEqual(claims.approver, "alice")
        XCTAssertEqual(claims.requestId, decision.requestId())
        XCTAssertThrowsKind(.alreadyUsed) {
            try remote.acceptApprovalMarker(marker: marker, tool: "delete_file", argumentsJson: #"{"path":"/tmp/a"}"#)
        }
        XCTAssertThrowsKind(.alreadyUsed) { try local.approvalMarker(tool: "delete_file", decision: decision) }
        local.close()
        remote.close()
    }

    func testAnApprovalMarkerForOtherArgumentsOrKeysIsRefused() async throws {
        let local = try remoteGate(Recorder())
        let remote = try remoteGate(Recorder())
        let stranger = try remoteGate(Recorder(), keys: try tokenKeys("k1", secretB))
        let marker = try local.approvalMarker(tool: "delete_file", decision: try await decided(local, edit: #"{"path":"/tmp/b"}"#))
        XCTAssertThrowsKind(.mismatch) {
            try remote.acceptApprovalMarker(marker: marker, tool: "delete_file", argumentsJson: #"{"path":"/tmp/a"}"#)
        }
        XCTAssertThrowsKind(.badSignature) {
            try stranger.acceptApprovalMarker(marker: marker, tool: "delete_file", argumentsJson: #"{"path":"/tmp/b"}"#)
        }
        _ = try remote.acceptApprovalMarker(marker: marker, tool: "delete_file", argumentsJson: #"{"path":"/tmp/b"}"#)
        local.close()
        remote.close()
        stranger.close()
    }

    func testOnlyAPersonsApprovalGetsAMarker() async throws {
        let local = try remoteGate(Recorder())
        let denied = try await decided(local, deny: true)
        XCTAssertFalse(denied.isApproved())
        XCTAssertThrowsKind(.malformed) { try local.approvalMarker(tool: "delete_file", decision: denied) }
        local.close()
    }
}
