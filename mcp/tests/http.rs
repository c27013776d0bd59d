//! Streamable HTTP on both sides, with rmcp's own parts: an rmcp upstream served over HTTP (axum
//! on a free loopback port) and configured by `url`, the gate served by [`HttpServer`], and
//! rmcp's Streamable HTTP client (which declares no elicitation) calling it. A gated call is
//! pending elsewhere, approved with a signed token, and the identical retry runs the upstream
//! exactly once, over HTTP. A 2025-06-18 client that does declare elicitation has its open form
//! withdrawn over HTTP when the request is decided elsewhere.

mod common;
use common::client::Slow;
use common::{Counter, reaches, text, write};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService};
use signoff::{Gate, TokenResponse};
use signoff_mcp::{HttpConfig, HttpServer, McpGate, ProxyConfig, UpstreamConfig};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Serves `upstream` over Streamable HTTP on a free loopback port; returns its URL.
async fn serve_upstream(upstream: Counter) -> String {
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/mcp")
}

/// The proxy over Streamable HTTP in front of an upstream (also over HTTP) that counts its runs
/// in `runs`, serving until `stop` is sent: its gate, URL, `stop` and the serving task.
async fn proxy_over_http(
    runs: &Counter,
) -> (Gate, String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), String>>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let upstream_url = serve_upstream(runs.clone()).await;
    let config = ProxyConfig {
        upstreams: vec![UpstreamConfig::url("up", &upstream_url)],
        default_timeout_ms: Some(30_000),
        ..Default::default()
    };
    config.check().unwrap();
    let mcp = McpGate::from_config(&config).await.unwrap();
    let gate = mcp.gate().clone();
    let server = HttpServer::bind(mcp, "127.0.0.1:0", &HttpConfig::default()).await.unwrap();
    let url = server.url().to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    (gate, url, stop, serving)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_over_http_pending_elsewhere_then_approved_runs_once() {
    let runs = Counter::default();
    let (gate, url, stop, serving) = proxy_over_http(&runs).await;
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp") && !url.contains(":0/"), "{url}");

    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.expect("connect over HTTP");
    let call = |t: &str| {
        let (client, p) = (&client, write(t));
        async move { client.call_tool(p).await.expect("tools/call") }
    };

    let r = call("a").await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("pending elsewhere"), "{}", text(&r));
    let pending = gate.pending();
    assert_eq!(pending.len(), 1);
    let request = pending[0].clone();
    assert_eq!(runs.0.load(Ordering::SeqCst), 0);

    let token = gate.issue_token(&request.id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "approval alone runs nothing");

    let r = call("a").await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(text(&r), "wrote \"a\" (run 1)");
    let r = call("a").await;
    assert!(text(&r).contains("pending elsewhere"), "the next identical call is a new request");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);

    let _ = client.cancel().await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    gate.close();
}

#[tokio::test]
async fn a_foreign_origin_is_refused_before_anything_runs() {
    let runs = Counter::default();
    let upstream_url = serve_upstream(runs.clone()).await;
    let config = ProxyConfig { upstreams: vec![UpstreamConfig::url("up", &upstream_url)], ..Default::default() };
    let mcp = McpGate::from_config(&config).await.unwrap();
    let server = HttpServer::bind(mcp, "127.0.0.1:0", &HttpConfig::default()).await.unwrap();
    let addr = server.url().trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let status = |origin: Option<&str>| {
        let (addr, body) = (addr.clone(), body.to_owned());
        let origin = origin.map(|o| format!("Origin: {o}\r\n")).unwrap_or_default();
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let req = format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\n{origin}Content-Type: application/json\r\n\
                 Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut head = [0u8; 12];
            s.read_exact(&mut head).await.unwrap();
            String::from_utf8_lossy(&head[9..12]).into_owned()
        }
    };
    assert_eq!(status(Some("http://evil.example")).await, "403");
    assert_eq!(status(None).await, "200");
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// Over Streamable HTTP too, a person's form still open when the request is decided elsewhere
/// is withdrawn: the proxy's `notifications/cancelled` for its `elicitation/create` reaches the
/// client, and the call runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_form_still_open_when_the_request_is_decided_elsewhere_is_withdrawn() {
    let runs = Counter::default();
    let (gate, url, stop, serving) = proxy_over_http(&runs).await;
    let person = Slow::default();
    let client = person.clone().serve(StreamableHttpClientTransport::from_uri(url)).await.expect("connect over HTTP");

    let call = client.call_tool(write("a"));
    let elsewhere = async {
        let asked = async {
            while person.asked.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), asked).await.expect("the person was never asked");
        let request = gate.pending()[0].clone();
        gate.respond(signoff::ConfirmationResponse::approve(&request).with_responder("alice")).unwrap();
    };
    let (r, ()) = tokio::join!(call, elsewhere);
    let r = r.expect("tools/call");
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert!(reaches(&person.withdrawn, 1).await, "the question was not withdrawn over Streamable HTTP");
    person.release.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);

    let _ = client.cancel().await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    gate.close();
}
