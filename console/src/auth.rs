//! Who is at the keyboard: approver keys, sign-in links, browser sessions, CSRF, and the
//! same-origin and Host checks every request passes.
//!
//! The console only establishes *who* a person is. Whether they may approve a request is decided
//! by the gate's authenticator when their answer arrives (as a signed, single-use token issued
//! to them), never here.

use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use signoff::{Error, Result};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest approver key accepted (characters).
pub const MIN_KEY_LEN: usize = 16;

/// Approvers who sign in with a name and a key, e.g. from a file only operators can read:
///
/// ```text
/// # approver:key             (the key in clear, at least 16 characters)
/// alice:correct-horse-battery-staple
/// # approver:sha256:<hex>    (the SHA-256 of the key, so the file holds no secret)
/// bob:sha256:4f0c...e1
/// ```
///
/// Keys are compared by their SHA-256 digests in constant time. `Debug` never shows them.
#[derive(Clone, Default)]
pub struct ApproverKeys {
    keys: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for ApproverKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproverKeys").field("approvers", &self.names()).finish_non_exhaustive()
    }
}

impl ApproverKeys {
    /// No approvers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `approver`, who signs in with `key` (at least [`MIN_KEY_LEN`] characters).
    ///
    /// Errors: `config` for an empty or duplicate name, or a short key.
    pub fn add(mut self, approver: &str, key: &str) -> Result<Self> {
        if key.chars().count() < MIN_KEY_LEN {
            return Err(Error::Config(format!(
                "the key of approver {approver:?} is too short (at least {MIN_KEY_LEN} characters)"
            )));
        }
        self.push(approver, Sha256::digest(key.as_bytes()).into())?;
        Ok(self)
    }

    fn push(&mut self, approver: &str, digest: [u8; 32]) -> Result<()> {
        let approver = approver.trim();
        if approver.is_empty() {
            return Err(Error::Config("an approver key needs an approver name".into()));
        }
        if self.keys.iter().any(|(n, _)| n == approver) {
            return Err(Error::Config(format!("approver {approver:?} is listed twice")));
        }
        self.keys.push((approver.to_owned(), digest));
        Ok(())
    }

    /// Parses the file format above.
    ///
    /// Errors: `config`, naming the line.
    pub fn parse(text: &str) -> Result<Self> {
        let mut keys = ApproverKeys::new();
        for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, key) = line
                .split_once(':')
                .ok_or_else(|| Error::Config(format!("approver keys line {n}: expected `approver:key`")))?;
            match key.strip_prefix("sha256:") {
                Some(hex) => {
                    let digest = decode_hex32(hex.trim())
                        .ok_or_else(|| Error::Config(format!("approver keys line {n}: sha256: takes 64 hex digits")))?;
                    keys.push(name, digest)
                }
                None => keys.clone().add(name, key).map(|k| keys = k),
            }
            .map_err(|e| Error::Config(format!("approver keys line {n}: {}", config_text(e))))?;
        }
        if keys.keys.is_empty() {
            return Err(Error::Config("the approver keys list no approver".into()));
        }
        Ok(keys)
    }

    /// Reads [`parse`](Self::parse)'s format from a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read approver keys from {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// The `sha256:<hex>` form of a key, for a file that should hold no secret.
    pub fn hash_key(key: &str) -> String {
        let d: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        format!("sha256:{}", d.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }

    /// The approvers' names.
    pub fn names(&self) -> Vec<&str> {
        self.keys.iter().map(|(n, _)| n.as_str()).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `key` is `approver`'s. Every entry is compared, in constant time.
    pub(crate) fn check(&self, approver: &str, key: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut found = false;
        for (name, want) in &self.keys {
            let same = constant_time_eq(want, &digest);
            found |= same & (name == approver);
        }
        found
    }
}

fn config_text(e: Error) -> String {
    match e {
        Error::Config(s) => s,
        other => other.to_string(),
    }
}

fn decode_hex32(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_token() -> String {
    let mut b = [0u8; 32];
    rand::Rng::fill(&mut rand::rng(), &mut b[..]);
    URL_SAFE_NO_PAD.encode(b)
}

/// A signed-in browser.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub approver: String,
    /// The page key: handed over once, in the answer to the sign-in, and never in a page. The
    /// console's script keeps it in `localStorage`, which only pages of this exact origin (port
    /// included) can read, and sends it with every request that reads or changes anything. The
    /// cookie alone opens nothing: browsers do not keep cookies apart by port, so every other
    /// server on the same host (an agent's dev server, say) receives it.
    pub key: String,
    expires: Instant,
}

/// The console's sign-ins: sessions by the SHA-256 of their cookie (the cookie itself is never
/// kept), and the sign-in links already used.
pub(crate) struct Sessions {
    ttl: Duration,
    /// This console's cookie name (`signoff_console_` and random letters): two consoles on one
    /// host, on different ports, would otherwise overwrite each other's cookie.
    cookie_name: String,
    map: Mutex<HashMap<[u8; 32], Session>>,
    /// Wrong keys per approver name and per (name, source address): (failures, first failure of
    /// the window).
    failures: Mutex<Failures>,
}

#[derive(Default)]
struct Failures {
    by_source: HashMap<(String, Option<IpAddr>), (u32, Instant)>,
    by_name: HashMap<String, (u32, Instant)>,
}

/// Wrong keys for one approver name from one source address within [`WINDOW`] before each
/// further wrong key's answer is delayed more (see [`Sessions::failed`]).
pub(crate) const FREE_FAILURES: u32 = 5;
/// Wrong keys for one approver name from all addresses together within [`WINDOW`] before every
/// wrong key for it waits the longest: bounds guessing spread over many addresses.
pub(crate) const MAX_NAME_FAILURES: u32 = 100;
/// How long wrong keys are remembered.
pub(crate) const WINDOW: Duration = Duration::from_secs(300);
/// The first delay of a wrong key's answer, doubled per wrong key past [`FREE_FAILURES`].
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(300);
/// The longest delay of a wrong key's answer.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(5);
/// Names, and (name, address) pairs, counted at most: a wrong key for a name or pair not
/// counted yet once the table is full waits the longest, until entries expire.
const COUNTED: usize = 10_000;

impl Sessions {
    pub fn new(ttl: Duration) -> Self {
        let mut b = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut b[..]);
        let suffix: String = b.iter().map(|x| format!("{x:02x}")).collect();
        Sessions {
            ttl,
            cookie_name: format!("signoff_console_{suffix}"),
            map: Mutex::new(HashMap::new()),
            failures: Mutex::new(Failures::default()),
        }
    }

    /// Counts a wrong key for `approver` from `source` (the client's address, when known) and
    /// says how long its answer waits: [`FIRST_DELAY`], doubled per wrong key of that name from
    /// that address past [`FREE_FAILURES`] within [`WINDOW`], and [`MAX_DELAY`] once the name had
    /// [`MAX_NAME_FAILURES`] from everywhere (or a full table cannot count it). Names nobody has
    /// are counted too, so guessing names and keys costs the same.
    ///
    /// Nothing is ever locked: the right key signs in whatever wrong keys came before, from any
    /// address. On loopback every local process is 127.0.0.1, the supervised agent included, so a
    /// lock on a name (or on a name from an address) let anyone who could reach the console keep
    /// the real approver out; the delays bound guessing instead (keys have at least
    /// [`MIN_KEY_LEN`] characters). Also returns how many wrong keys that pair had in the window,
    /// for the audit.
    pub fn failed(&self, approver: &str, source: Option<IpAddr>) -> (Duration, u32) {
        let now = Instant::now();
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.by_source.retain(|_, (_, since)| now.duration_since(*since) < WINDOW);
        f.by_name.retain(|_, (_, since)| now.duration_since(*since) < WINDOW);
        let key = (approver.to_owned(), source);
        let pair = if f.by_source.len() < COUNTED || f.by_source.contains_key(&key) {
            let e = f.by_source.entry(key).or_insert((0, now));
            e.0 = e.0.saturating_add(1);
            Some(e.0)
        } else {
            None
        };
        let name = if f.by_name.len() < COUNTED || f.by_name.contains_key(approver) {
            let e = f.by_name.entry(approver.to_owned()).or_insert((0, now));
            e.0 = e.0.saturating_add(1);
            Some(e.0)
        } else {
            None
        };
        let delay = match (pair, name) {
            (Some(n), Some(all)) if all < MAX_NAME_FAILURES => {
                let past = n.saturating_sub(FREE_FAILURES).min(8);
                FIRST_DELAY.saturating_mul(1 << past).min(MAX_DELAY)
            }
            // Guessed from everywhere, or more than the tables can count.
            _ => MAX_DELAY,
        };
        (delay, pair.unwrap_or(u32::MAX))
    }

    /// Starts a session; returns the cookie value and the page key.
    pub fn start(&self, approver: String) -> (String, String) {
        let cookie = random_token();
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, s| s.expires > now);
        let key = random_token();
        map.insert(
            Sha256::digest(cookie.as_bytes()).into(),
            Session { approver, key: key.clone(), expires: now + self.ttl },
        );
        (cookie, key)
    }

    /// The key of the session a request's cookie names (live or not), for [`is_live`](Self::is_live).
    pub fn key(&self, headers: &HeaderMap) -> Option<[u8; 32]> {
        cookie(headers, &self.cookie_name).map(|c| Sha256::digest(c.as_bytes()).into())
    }

    /// Whether the session `key` names is still live (not signed out, not expired).
    pub fn is_live(&self, key: &[u8; 32]) -> bool {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).is_some_and(|s| s.expires > Instant::now())
    }

    /// The session a request's cookie names, if it is live. Whether the request also carries
    /// the session's page key is the caller's to check ([`Session::key`]).
    pub fn get(&self, headers: &HeaderMap) -> Option<Session> {
        let cookie = cookie(headers, &self.cookie_name)?;
        let key: [u8; 32] = Sha256::digest(cookie.as_bytes()).into();
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&key).filter(|s| s.expires > Instant::now()).cloned()
    }

    pub fn end(&self, headers: &HeaderMap) {
        if let Some(cookie) = cookie(headers, &self.cookie_name) {
            let key: [u8; 32] = Sha256::digest(cookie.as_bytes()).into();
            self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        }
    }

    pub fn cookie_header(&self, value: &str, secure: bool) -> String {
        format!(
            "{}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
            self.cookie_name,
            self.ttl.as_secs(),
            if secure { "; Secure" } else { "" }
        )
    }

    pub fn clear_cookie_header(&self, secure: bool) -> String {
        format!(
            "{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
            self.cookie_name,
            if secure { "; Secure" } else { "" }
        )
    }
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Which `Host` headers the console answers (DNS rebinding: a page on another name that
/// resolves to 127.0.0.1 must not reach it).
#[derive(Clone, Debug)]
pub(crate) enum Hosts {
    /// `localhost`, `127.0.0.1` and `[::1]`, any port.
    Loopback,
    /// Exactly these `host[:port]` values.
    Only(Vec<String>),
    /// Any host (the console was bound to a non-loopback address without a public origin).
    Any,
}

impl Hosts {
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(host) = host else { return false };
        match self {
            Hosts::Any => true,
            Hosts::Only(list) => list.iter().any(|h| h.eq_ignore_ascii_case(host)),
            Hosts::Loopback => {
                let name = match host.strip_prefix('[') {
                    Some(rest) => rest.split_once(']').map(|(n, _)| n),
                    None => Some(host.rsplit_once(':').map_or(host, |(n, _)| n)),
                };
                matches!(name, Some(n) if n.eq_ignore_ascii_case("localhost") || n == "127.0.0.1" || n == "::1")
            }
        }
    }
}

/// Whether a state-changing request comes from the console's own pages: its `Origin` (or, when
/// a browser sends none, `Sec-Fetch-Site`) must be this origin. Browsers always send `Origin`
/// on cross-site POSTs, so a form or `fetch` on another site is refused here, before the CSRF
/// token is even looked at.
pub(crate) fn same_origin(headers: &HeaderMap, public_origin: Option<&str>) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) {
        if let Some(public) = public_origin {
            return origin.eq_ignore_ascii_case(public.trim_end_matches('/'));
        }
        let Some(host) = host else { return false };
        return origin.eq_ignore_ascii_case(&format!("http://{host}"))
            || origin.eq_ignore_ascii_case(&format!("https://{host}"));
    }
    match headers.get("sec-fetch-site").and_then(|s| s.to_str().ok()) {
        Some(site) => site == "same-origin",
        // Not a browser (a script with the session cookie and the page key): allowed.
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_take_clear_and_hashed_keys() {
        let hashed = ApproverKeys::hash_key("bob-has-a-long-key");
        let keys = ApproverKeys::parse(&format!("# comment\nalice:correct-horse-battery\nbob:{hashed}\n")).unwrap();
        assert!(keys.check("alice", "correct-horse-battery"));
        assert!(keys.check("bob", "bob-has-a-long-key"));
        assert!(!keys.check("alice", "bob-has-a-long-key"));
        assert!(!keys.check("carol", "correct-horse-battery"));
        assert!(!format!("{keys:?}").contains("horse"));
        for bad in ["alice:short", "nocolon", "a:x\na:y-but-long-enough-key", "bob:sha256:zz", ""] {
            assert!(ApproverKeys::parse(bad).is_err(), "{bad}");
        }
    }

    /// Wrong keys make their answers wait longer and longer, never lock anything; junk names that
    /// fill the tables cannot switch the delays off (what is not counted waits the longest).
    #[test]
    fn wrong_keys_wait_longer_and_a_full_table_waits_the_longest() {
        let s = Sessions::new(Duration::from_secs(60));
        let addr: Option<IpAddr> = Some("10.0.0.9".parse().unwrap());
        let delays: Vec<Duration> = (0..12).map(|_| s.failed("alice", addr).0).collect();
        assert!(delays[..FREE_FAILURES as usize].iter().all(|d| *d == FIRST_DELAY), "{delays:?}");
        assert!(delays.windows(2).all(|w| w[0] <= w[1]) && delays[11] == MAX_DELAY, "{delays:?}");
        // Another address starts at the first delay: the guesser's count is its own.
        assert_eq!(s.failed("alice", Some("10.0.0.10".parse().unwrap())).0, FIRST_DELAY);
        let s = Sessions::new(Duration::from_secs(60));
        for i in 0..COUNTED {
            s.failed(&format!("junk-{i}"), addr);
        }
        assert_eq!(s.failed("alice", addr).0, MAX_DELAY);
        assert_eq!(s.failed("alice", Some("10.0.0.10".parse().unwrap())).0, MAX_DELAY);
    }

    #[test]
    fn loopback_hosts_only() {
        let h = Hosts::Loopback;
        for ok in ["127.0.0.1:8080", "localhost:1", "[::1]:9", "LOCALHOST"] {
            assert!(h.allows(Some(ok)), "{ok}");
        }
        for bad in ["evil.example:8080", "127.0.0.1.evil.example", "[::2]:1"] {
            assert!(!h.allows(Some(bad)), "{bad}");
        }
        assert!(!h.allows(None));
    }
}
