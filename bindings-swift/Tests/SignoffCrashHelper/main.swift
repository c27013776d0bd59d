// A child process for Tests/SignoffTests/RemoteTests.swift (macOS): it leaves requests in a
// durable store the way a crashed app does, and the test then kills it with SIGKILL (no close(),
// nothing flushed). Not a product of the package; `swift build` / `swift test` build it next to
// the test bundle.
//
// Usage: SignoffCrashHelper <database> <runs file> <pending|hang> <token keys>
//   pending: a pending delete_file call, and a send_email call whose deadline is 0.5 s away;
//            prints "<delete_file request id> <token for alice> <send_email request id>"
//   hang:    a delete_file call approved with its token whose tool never returns; prints
//            "<request id> <token>", then "EXECUTING" once the tool runs
// Each tool run appends a line to the runs file (what the test counts).

import Foundation
import Signoff

enum Helper {
    static let arguments = CommandLine.arguments
    static var database: String { arguments[1] }
    static var runsFile: String { arguments[2] }
    static var mode: String { arguments[3] }
    static var keys: String { arguments[4] }
}

struct PathArgs: Codable {
    let path: String
}

func say(_ line: String) {
    print(line)
    fflush(stdout)
}

func recordRun(_ line: String) {
    let existing = (try? String(contentsOfFile: Helper.runsFile, encoding: .utf8)) ?? ""
    try? (existing + line + "\n").write(toFile: Helper.runsFile, atomically: false, encoding: .utf8)
}

guard Helper.arguments.count == 5 else {
    FileHandle.standardError.write(Data("usage: SignoffCrashHelper <database> <runs file> <pending|hang> <keys>\n".utf8))
    exit(2)
}

let gate = try Gate.open(
    config: GateConfig(denyWhenUnobserved: false, storePath: Helper.database, tokenKeys: Helper.keys)
)
let pathSchema = #"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#
try gate.registerTool(ToolSpec(name: "delete_file", parametersJson: pathSchema)) { (args: PathArgs) -> [String: String] in
    recordRun(args.path)
    if Helper.mode == "hang" {
        say("EXECUTING")
        try await Task.sleep(nanoseconds: 3_600_000_000_000)
    }
    return ["deleted": args.path]
}
try gate.registerTool(ToolSpec(name: "send_email", approval: .required, timeoutMs: 500), executeJson: { _ in
    recordRun("send_email")
    return #""sent""#
})
_ = try gate.recover()

// Keep the handles: releasing one cancels its call.
var calls = [try gate.executeCancellable(call: ToolCall(tool: "delete_file", argumentsJson: #"{"path":"/tmp/a"}"#, callId: "c1"))]
if Helper.mode == "pending" {
    calls.append(try gate.executeCancellable(call: ToolCall(tool: "send_email", argumentsJson: #"{"to":"x"}"#)))
}
while gate.pendingCount() < UInt64(calls.count) {
    try await Task.sleep(nanoseconds: 5_000_000)
}
let pending = gate.pending()
guard let request = pending.first(where: { $0.tool == "delete_file" }) else { exit(3) }
let token = try gate.issueToken(requestId: request.id, approver: "alice")
say(([request.id, token] + pending.filter { $0.tool == "send_email" }.map(\.id)).joined(separator: " "))
if Helper.mode == "hang" {
    _ = try gate.respondToken(token: token, approver: "alice", decision: .approve)
}
try await Task.sleep(nanoseconds: 3_600_000_000_000)  // until killed
withExtendedLifetime(calls) {}
