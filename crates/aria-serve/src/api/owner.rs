//! Who is asking: the client key a job is owned by, the admin token, query parameters.
//!
//! A client names itself with the `X-Aria-Client` header (or `?client=` on links a browser
//! follows, such as `<audio src>`); the web page makes a random key once and keeps it in
//! `localStorage`. A job belongs to the key that submitted it, stored as a SHA-256 hash (the
//! key itself is never stored). A request without a key is the `anonymous` client: it sees
//! the jobs submitted without a key, and only those. A request carrying the configured
//! `admin_token` (as `Authorization: Bearer …` or `?token=`) sees and cancels every job.

use axum::extract::Request;
use axum::http::header;
use sha2::{Digest, Sha256};

/// The header naming the client.
pub const CLIENT_HEADER: &str = "x-aria-client";

/// The longest client key accepted (longer ones are cut there before hashing).
const MAX_KEY: usize = 256;

/// The caller of a request: the owner key its jobs get and whether it sees every job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The hashed client key (`owner` of the jobs it submits).
    pub owner: String,
    /// Whether it presented the admin token.
    pub admin: bool,
}

impl Caller {
    /// Whether a job owned by `owner` (`None`: a job without one, i.e. anonymous) is visible.
    pub fn sees(&self, owner: Option<&str>) -> bool {
        self.admin || owner.unwrap_or(&anonymous_owner()) == self.owner
    }
}

/// The stored owner of a job: the hex SHA-256 of the client key.
pub fn owner_hash(key: &str) -> String {
    let cut: String = key.chars().take(MAX_KEY).collect();
    Sha256::digest(format!("aria-client:{cut}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The owner of jobs submitted without a client key.
pub fn anonymous_owner() -> String {
    owner_hash("")
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decode `s` (`%XX`; a `%` not followed by two hex digits stays as it is; `+` stays
/// `+`).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The values of `key` in a query string, each as sent and percent-decoded.
pub fn query_values<'a>(query: Option<&'a str>, key: &'a str) -> impl Iterator<Item = String> + 'a {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(move |kv| kv.split_once('=').filter(|(k, _)| *k == key))
        .flat_map(|(_, v)| [v.to_string(), percent_decode(v)])
}

/// Whether the request presents `token` (bearer header, or `?token=`, raw or percent-decoded).
pub fn presents(req: &Request, token: &str) -> bool {
    let same = |t: &str| super::same(t.as_bytes(), token.as_bytes());
    let header_ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| same(t.trim()));
    header_ok || query_values(req.uri().query(), "token").any(|t| same(&t))
}

/// The caller of `req` under the server's `admin_token`.
pub fn caller(req: &Request, admin_token: Option<&str>) -> Caller {
    let admin = admin_token.is_some_and(|t| presents(req, t));
    let key = req
        .headers()
        .get(CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .or_else(|| {
            req.uri()
                .query()
                .unwrap_or("")
                .split('&')
                .filter_map(|kv| kv.strip_prefix("client="))
                .map(percent_decode)
                .find(|v| !v.trim().is_empty())
        });
    Caller {
        owner: owner_hash(key.as_deref().unwrap_or("").trim()),
        admin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes_and_keeps_the_rest() {
        assert_eq!(percent_decode("a%2Bb%2F%3D%25"), "a+b/=%");
        assert_eq!(percent_decode("a+b"), "a+b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn owners_differ_by_key_and_hide_the_key() {
        assert_ne!(owner_hash("a"), owner_hash("b"));
        assert_eq!(owner_hash("a").len(), 64);
        assert!(!owner_hash("secret-key").contains("secret"));
        let c = Caller {
            owner: anonymous_owner(),
            admin: false,
        };
        assert!(c.sees(None));
        assert!(!c.sees(Some(&owner_hash("a"))));
    }
}
