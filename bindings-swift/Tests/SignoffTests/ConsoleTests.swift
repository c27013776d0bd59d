// The browser approval console (`Gate.serveConsole(options:)`, `Console`) against its real server,
// with URLSession: sign-in, the session cookie and page key, a real gated call decided over HTTP, errors,
// closing. Mirrors bindings-swift/tests-python/test_console.py (the same cases over the same C ABI
// on machines without Swift); run with `swift test` on a Mac after ./build-xcframework.sh.

import Foundation
import XCTest
import Signoff

/// Refuses every redirect, so a test sees the 303 itself.
private final class NoRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}

private struct Reply {
    let status: Int
    let headers: HTTPURLResponse
    let body: String

    func header(_ name: String) -> String? { headers.value(forHTTPHeaderField: name) }
    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
    }
}

/// Just enough of a browser: the console's origin, its session cookie, the page key from the
/// sign-in's answer (the console's script keeps it in the origin's storage). Cookies
/// are handled by hand (the session stores none), so each test sees exactly what the server set.
private final class Browser {
    let base: URL
    let origin: String
    var cookie: String?
    var key: String?
    private let session: URLSession

    init(_ console: Console) {
        base = URL(string: console.url())!
        origin = "http://127.0.0.1:\(console.port())"
        let config = URLSessionConfiguration.ephemeral
        config.httpShouldSetCookies = false
        config.httpCookieAcceptPolicy = .never
        config.httpCookieStorage = nil
        config.timeoutIntervalForRequest = 20
        session = URLSession(configuration: config, delegate: NoRedirects(), delegateQueue: nil)
    }

    deinit { session.invalidateAndCancel() }

    func request(_ method: String, _ path: String, body: [String: Any]? = nil, headers: [String: String] = [:]) async throws -> Reply {
        var request = URLRequest(url: URL(string: base.absoluteString + path)!)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let cookie { request.setValue(cookie, forHTTPHeaderField: "Cookie") }
        if let body {
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw TimedOut(what: "an HTTP response") }
        return Reply(status: http.statusCode, headers: http, body: String(decoding: data, as: UTF8.self))
    }

    func signIn(_ link: String) async throws -> Reply {
        let token = String(link[link.range(of: "#token=")!.upperBound...])
        let reply = try await request("POST", "login", body: ["token": token], headers: ["Origin": origin])
        if reply.status == 200, let setCookie = reply.header("Set-Cookie") {
            cookie = setCookie.components(separatedBy: ";")[0]
            key = reply.json["key"] as? String
        }
        return reply
    }

    func loadPage() async throws -> String {
        let reply = try await request("GET", "")
        XCTAssertEqual(reply.status, 200, reply.body)
        return reply.body
    }

    func decide(_ request: ConfirmationRequest, _ fields: [String: Any] = [:]) async throws -> Reply {
        var body: [String: Any] = [
            "id": request.id, "digest": request.argumentsDigest, "decision": "approve", "scope": "once",
        ]
        body.merge(fields) { _, new in new }
        return try await self.request("POST", "api/decide", body: body, headers: ["Origin": origin, "x-signoff-key": key ?? ""])
    }
}

/// Whether nothing listens on `port` any more (a connection is refused).
private func refused(_ port: UInt16) async -> Bool {
    let config = URLSessionConfiguration.ephemeral
    config.timeoutIntervalForRequest = 5
    let session = URLSession(configuration: config)
    defer { session.invalidateAndCancel() }
    do {
        _ = try await session.data(from: URL(string: "http://127.0.0.1:\(port)/login")!)
        return false
    } catch let error as URLError {
        return error.code == .cannotConnectToHost
    } catch {
        return false
    }
}

final class ConsoleTests: XCTestCase {
    override func setUp() {
        super.setUp()
        executionTimeAllowance = 60
    }

    func testSignInThenApproveARealCallOverHTTP() async throws {
        let recorder = Recorder()
        let gate = try remoteGate(recorder, config: GateConfig())
        let console = try gate.serveConsole(options: ConsoleOptions(title: "approvals"))
        defer {
            console.close()
            gate.close()
        }
        XCTAssertTrue(console.url().hasPrefix("http://127.0.0.1:"))
        XCTAssertTrue(console.url().hasSuffix("/"))
        XCTAssertEqual(URL(string: console.url())?.port, Int(console.port()))
        XCTAssertFalse(console.isClosed())
        let browser = Browser(console)

        var reply = try await browser.request("GET", "login")
        XCTAssertEqual(reply.status, 200)
        XCTAssertTrue(reply.header("Content-Type")?.hasPrefix("text/html") ?? false)
        XCTAssertTrue(reply.body.contains("<html"))
        reply = try await browser.request("GET", "")
        XCTAssertEqual(reply.status, 303)
        XCTAssertEqual(reply.header("Location"), "login")

        let link = try console.signInLink(approver: "alice")
        XCTAssertTrue(link.hasPrefix(console.url() + "login#token="))
        reply = try await browser.signIn(link)
        XCTAssertEqual(reply.status, 200, reply.body)
        XCTAssertEqual(reply.json["approver"] as? String, "alice")
        XCTAssertGreaterThanOrEqual((reply.json["key"] as? String)?.count ?? 0, 43)
        let setCookie = reply.header("Set-Cookie") ?? ""
        XCTAssertTrue(setCookie.contains("HttpOnly"), setCookie)
        XCTAssertTrue(setCookie.contains("SameSite=Strict"), setCookie)
        // A sign-in link is single-use.
        let again = try await Browser(console).signIn(link)
        XCTAssertEqual(again.status, 401)

        // The page is a shell: the key and the data come only with the key.
        let page = try await browser.loadPage()
        XCTAssertTrue(page.contains("approvals"))
        XCTAssertFalse(page.contains(browser.key ?? "no key"))

        let (handle, request) = try await pendingCall(gate, "/tmp/x")
        XCTAssertEqual(request.tool, "delete_file")

        // The cookie without the page key (what any other server on this host receives):
        // refused, and nothing changes.
        reply = try await browser.request(
            "POST", "api/decide",
            body: ["id": request.id, "digest": request.argumentsDigest, "decision": "approve"],
            headers: ["Origin": browser.origin]
        )
        XCTAssertEqual(reply.status, 401)
        XCTAssertEqual(reply.json["kind"] as? String, "key")
        XCTAssertEqual(gate.pendingCount(), 1)

        reply = try await browser.decide(request)
        XCTAssertEqual(reply.status, 200, reply.body)
        XCTAssertEqual(reply.json["outcome"] as? String, "approved")
        let result = await handle.wait()
        XCTAssertEqual(result?.status, .executed)
        let runs = await recorder.items
        XCTAssertEqual(runs, ["/tmp/x"])
        // Answered once: a second decision loses, and the tool still ran once.
        reply = try await browser.decide(request)
        XCTAssertEqual(reply.status, 409, reply.body)
        let runsAfter = await recorder.items
        XCTAssertEqual(runsAfter, ["/tmp/x"])
    }

    func testApproverKeysSignIn() async throws {
        let gate = try remoteGate(Recorder(), config: GateConfig())
        defer { gate.close() }
        var console = try gate.serveConsole(
            options: ConsoleOptions(approverKeys: ["carol": "carol-has-a-long-key"], signInTtlMs: 60_000)
        )
        var browser = Browser(console)
        var reply = try await browser.request(
            "POST", "login", body: ["approver": "carol", "key": "carol-has-a-long-key"], headers: ["Origin": browser.origin]
        )
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.json["approver"] as? String, "carol")
        reply = try await browser.request(
            "POST", "login", body: ["approver": "carol", "key": "not-carols-key-at-all"], headers: ["Origin": browser.origin]
        )
        XCTAssertEqual(reply.status, 401)
        console.close()

        let file = try temporaryDirectory().appendingPathComponent("approvers").path
        try writeLines(file, ["dave:dave-has-a-long-key"])
        console = try gate.serveConsole(options: ConsoleOptions(approverKeysFile: file, sessionTtlMs: 3_600_000))
        browser = Browser(console)
        reply = try await browser.request(
            "POST", "login", body: ["approver": "dave", "key": "dave-has-a-long-key"], headers: ["Origin": browser.origin]
        )
        XCTAssertEqual(reply.status, 200)
        console.close()
    }

    func testConfigurationErrors() throws {
        XCTAssertThrowsKind(.config) { try Gate().serveConsole() }
        let gate = try remoteGate(Recorder(), config: GateConfig())
        defer { gate.close() }
        for bad in [
            ConsoleOptions(bind: "localhost"),
            ConsoleOptions(bind: "0.0.0.0:0"),
            ConsoleOptions(publicOrigin: "approve.example.com"),
            ConsoleOptions(signInTtlMs: 0),
            ConsoleOptions(approverKeys: ["erin": "short"]),
            ConsoleOptions(approverKeys: ["erin": "erin-has-a-long-key"], approverKeysFile: "/nonexistent"),
            ConsoleOptions(approverKeysFile: "/nonexistent/approvers"),
        ] {
            XCTAssertThrowsKind(.config) { try gate.serveConsole(options: bad) }
        }
        let console = try gate.serveConsole()
        XCTAssertThrowsKind(.malformed) { try console.signInLink(approver: "") }
        console.close()
    }

    func testCloseReleasesThePortAndIsIdempotent() async throws {
        let gate = try remoteGate(Recorder(), config: GateConfig())
        defer { gate.close() }
        let console = try gate.serveConsole()
        let port = console.port()
        let openBefore = await refused(port)
        XCTAssertFalse(openBefore)
        console.close()
        XCTAssertTrue(console.isClosed())
        let refusedAfter = await refused(port)
        XCTAssertTrue(refusedAfter)
        console.close()
        XCTAssertTrue(console.isClosed())
    }
}
