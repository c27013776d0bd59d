//! Streamable HTTP on both sides of the proxy.
//!
//! **Upstreams** configured with a `url` are reached with rmcp's Streamable HTTP client (reqwest
//! over rustls, `ring` provider); those with a `command` run as child processes over stdio.
//!
//! **Serving** ([`HttpServer`]): rmcp's Streamable HTTP server (a tower service) mounted with
//! axum at one path (default `/mcp`), on a loopback address unless explicitly allowed otherwise.
//! rmcp validates `Host` against the allowed hosts (loopback names by default) and `Origin`
//! against the allowed origins (none by default: any request carrying an `Origin` is refused
//! with 403), which is the DNS-rebinding protection the MCP specification asks for. Optional
//! bearer tokens (by name) authenticate every request (401 otherwise).
//!
//! **Sessions.** Session grants ("approve for this session") and the 2026-07-28 retry are bound
//! to a gate session, which over HTTP is chosen per request:
//! - a 2025-era client has an MCP session (`Mcp-Session-Id`, created at `initialize` by rmcp and
//!   checked by it on every request): its gate session is that MCP session;
//! - a 2026-07-28 request is stateless (no `initialize`, no session id), so its gate session is
//!   derived from who is calling: the bearer token's name when tokens are configured, and the
//!   client's name (`clientInfo` in the request's `_meta`). Both rounds of one approval, and
//!   later calls by the same principal and client, share it; a different token or client name
//!   never does. Without bearer tokens the client's name is self-declared, so any local client
//!   naming itself the same shares the grants: configure tokens when that matters.

use crate::config::{HttpConfig, UpstreamConfig, UpstreamTransport};
use crate::gate::{McpGate, UpstreamClient};
use rmcp::model::ProtocolVersion;
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleClient, RoleServer, ServiceExt};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

/// The authenticated principal of an HTTP request (the bearer token's name), carried in the
/// request's extensions to the handler.
#[derive(Clone, Debug)]
struct Principal(String);

/// How long connecting to an upstream at start may take, up to the end of its `initialize`: a
/// child process may first have to fetch its package (`npx -y ...`). Longer is an error naming
/// the upstream, not a proxy that never starts.
pub(crate) const INITIALIZE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Connects to one upstream: a child process over stdio, or a Streamable HTTP endpoint, within
/// [`INITIALIZE_TIMEOUT`].
pub(crate) async fn connect_upstream(u: &UpstreamConfig) -> Result<RunningService<RoleClient, UpstreamClient>, String> {
    connect_upstream_within(u, INITIALIZE_TIMEOUT).await
}

/// [`connect_upstream`], its `initialize` answered within `limit` (a child process that has not
/// answered by then is killed).
async fn connect_upstream_within(
    u: &UpstreamConfig,
    limit: std::time::Duration,
) -> Result<RunningService<RoleClient, UpstreamClient>, String> {
    let name = &u.name;
    let late = || format!("upstream {name:?}: initialize: no answer within {}", crate::gate::shown(limit));
    match u.transport()? {
        UpstreamTransport::Command { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            // The child's stderr is ours: its diagnostics stay visible and never block it.
            let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|e| format!("upstream {name:?}: cannot start {command:?}: {e}"))?;
            let initialize = UpstreamClient::default().serve(transport);
            // Dropped unanswered, the transport kills the child.
            tokio::time::timeout(limit, initialize)
                .await
                .map_err(|_| late())?
                .map_err(|e| format!("upstream {name:?}: initialize: {e}"))
        }
        UpstreamTransport::Url { url, headers } => {
            install_crypto();
            let mut custom = HashMap::new();
            for (k, v) in headers {
                let bad = || format!("upstream {name:?}: header {k:?} is not a valid HTTP header");
                let k = http::HeaderName::try_from(k.as_str()).map_err(|_| bad())?;
                let v = http::HeaderValue::try_from(v.as_str()).map_err(|_| bad())?;
                custom.insert(k, v);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(custom);
            let transport = StreamableHttpClientTransport::from_config(config);
            tokio::time::timeout(limit, UpstreamClient::default().serve(transport))
                .await
                .map_err(|_| late())?
                .map_err(|e| format!("upstream {name:?}: cannot initialize an MCP session at {url}: {e}"))
        }
    }
}

/// rustls needs a process-wide crypto provider before reqwest builds a client (we build rustls
/// with `ring` only). Installing it twice is harmless.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The handle that serves one call over HTTP: its gate session chosen from the request (see the
/// module's documentation).
pub(crate) fn for_request(gate: &McpGate, cx: &RequestContext<RoleServer>) -> McpGate {
    let parts = cx.extensions.get::<http::request::Parts>();
    // rmcp checks `Mcp-Session-Id` only on legacy requests; on a 2026-07-28 (stateless) request
    // the header is not checked, so it must not choose the session there.
    let modern = cx.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    let mcp_session =
        parts.filter(|_| !modern).and_then(|p| p.headers.get("mcp-session-id")).and_then(|v| v.to_str().ok());
    let session = match mcp_session {
        Some(id) => format!("mcp-http-session:{id}"),
        None => {
            let token = authenticated(cx).unwrap_or_else(|| "-".into());
            let client =
                cx.client_info().map(|i| i.name).filter(|n| !n.is_empty()).unwrap_or_else(|| "mcp-client".into());
            format!("mcp-http-client:{}:{token}:{client}", token.len())
        }
    };
    McpGate { inner: gate.inner.clone(), session, per_request: false }
}

/// The bearer token's name when the request came over HTTP with one.
pub(crate) fn authenticated(cx: &RequestContext<RoleServer>) -> Option<String> {
    let parts = cx.extensions.get::<http::request::Parts>()?;
    parts.extensions.get::<Principal>().map(|p| p.0.clone())
}

/// The proxy served over Streamable HTTP, bound and ready: [`HttpServer::url`] says where, and
/// [`HttpServer::serve`] answers until told to stop.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    router: axum::Router,
    url: String,
    stop: tokio_util::sync::CancellationToken,
}

impl HttpServer {
    /// Binds `listen` (`host:port`; port 0 picks a free one) as `config` says: loopback only
    /// unless `allow_non_loopback`, `Host` and `Origin` validated, bearer tokens if configured.
    pub async fn bind(gate: McpGate, listen: &str, config: &HttpConfig) -> Result<HttpServer, String> {
        config.check()?;
        let addr = config.address(listen)?;
        let path = config.path.clone().unwrap_or_else(|| "/mcp".into());
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let hosts = match &config.allowed_hosts {
            Some(h) => h.clone(),
            None => {
                let mut h: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
                let ip = local.ip().to_string();
                if !h.contains(&ip) {
                    h.push(ip);
                }
                h
            }
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let server_config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(config.allowed_origins.clone())
            .enforce_origin_validation()
            .with_cancellation_token(stop.child_token());
        let handle = McpGate { inner: gate.inner.clone(), session: String::new(), per_request: true };
        let service = StreamableHttpService::new(
            move || Ok(handle.clone()),
            Arc::new(LocalSessionManager::default()),
            server_config,
        );
        let tokens = Arc::new(config.bearer_tokens.clone());
        let endpoint = axum::routing::any(move |req: axum::extract::Request| {
            let (service, tokens) = (service.clone(), tokens.clone());
            async move {
                let mut req = req;
                if !tokens.is_empty() {
                    match bearer(req.headers()).and_then(|t| token_name(&tokens, t)) {
                        Some(name) => {
                            req.extensions_mut().insert(Principal(name));
                        }
                        None => return unauthorized(),
                    }
                }
                let delete = req.method() == http::Method::DELETE;
                let response = service.handle(req).await;
                let (mut parts, body) = response.into_parts();
                // A session ended by the client (`DELETE`): rmcp answers 202 Accepted, which the
                // official clients report as "Session termination failed: 202" at every clean
                // exit. The session is gone once answered: 204 No Content says so.
                if delete && parts.status == http::StatusCode::ACCEPTED {
                    parts.status = http::StatusCode::NO_CONTENT;
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    parts.headers.remove(http::header::CONTENT_TYPE);
                    return axum::response::Response::from_parts(parts, axum::body::Body::empty());
                }
                axum::response::Response::from_parts(parts, axum::body::Body::new(body))
            }
        });
        let router = axum::Router::new().route(&path, endpoint);
        let url = format!("http://{local}{path}");
        Ok(HttpServer { listener, router, url, stop })
    }

    /// The endpoint's URL, with the real port.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Serves until `shutdown` completes; then ends every MCP session and returns.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), String> {
        let stop = self.stop.clone();
        let signal = async move {
            shutdown.await;
            stop.cancel();
        };
        axum::serve(self.listener, self.router).with_graceful_shutdown(signal).await.map_err(|e| format!("http: {e}"))
    }
}

fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The name of the configured token equal to `given` (compared in constant time per token).
fn token_name(tokens: &BTreeMap<String, String>, given: &str) -> Option<String> {
    let mut found = None;
    for (name, token) in tokens {
        let (a, b) = (token.as_bytes(), given.as_bytes());
        let same = a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
        if same {
            found = Some(name.clone());
        }
    }
    found
}

fn unauthorized() -> axum::response::Response {
    axum::response::Response::builder()
        .status(http::StatusCode::UNAUTHORIZED)
        .header(http::header::WWW_AUTHENTICATE, "Bearer")
        .body(axum::body::Body::from("Unauthorized: this MCP endpoint needs `Authorization: Bearer <token>`"))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A child process that never answers `initialize` (it does not read its input) is an error
    /// naming the upstream once the limit passes; before, the proxy waited for it for ever.
    #[tokio::test]
    async fn an_upstream_process_that_never_answers_initialize_is_an_error_naming_it() {
        let u = UpstreamConfig::command("mute", "sleep", &["30"]);
        let connecting = connect_upstream_within(&u, Duration::from_millis(300));
        let e = tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .expect("initialize is bounded")
            .err()
            .expect("an error");
        assert_eq!(e, "upstream \"mute\": initialize: no answer within 300 ms");
    }

    /// The same for a Streamable HTTP endpoint that takes the connection and never answers.
    #[tokio::test]
    async fn an_http_upstream_that_never_answers_initialize_is_an_error_naming_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let u = UpstreamConfig::url("silent", &url);
        let connecting = connect_upstream_within(&u, Duration::from_secs(1));
        let e = tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .expect("initialize is bounded")
            .err()
            .expect("an error");
        assert_eq!(e, "upstream \"silent\": initialize: no answer within 1 s");
        held.abort();
    }
}
