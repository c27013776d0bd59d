"""A Streamable HTTP forwarder in front of a real MCP server that delivers every request, except
the first `tools/call`:

- mode `500` (the default): forwarded, and once the server ran it, answered with HTTP 500 (a
  server that did the work and then failed to answer): the model must not be told it did not run;
- mode `429`: answered with HTTP 429 (rate limited) without forwarding it: it did not run, and
  the model may be told so.

Run: python failing_http.py <upstream URL> [500|429]   (prints "listening on http://127.0.0.1:PORT/mcp")"""
import http.client
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = urllib.parse.urlsplit(sys.argv[1])
MODE = sys.argv[2] if len(sys.argv) > 2 else "500"
failed = threading.Event()
HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            method = json.loads(body).get("method") if body else None
        except ValueError:
            method = None
        if MODE == "429" and method == "tools/call" and not failed.is_set():
            failed.set()
            self.reply(429, {"Content-Type": "text/plain", "Retry-After": "1"}, b"slow down")
            return
        conn = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn.request(self.command, UPSTREAM.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()  # the whole answer: the server has handled the request
        conn.close()
        if method == "tools/call" and not failed.is_set():
            failed.set()
            self.reply(500, {"Content-Type": "text/plain"}, b"internal error after the tool ran")
            return
        self.reply(resp.status, {k: v for k, v in resp.getheaders() if k.lower() not in HOP}, data)

    def reply(self, status, headers, data):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        # No server-initiated stream here (allowed by the protocol).
        self.reply(405, {"Allow": "POST, DELETE"}, b"")

    do_POST = forward
    do_DELETE = forward


server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
print(f"listening on http://127.0.0.1:{server.server_address[1]}/mcp", flush=True)
server.serve_forever()
