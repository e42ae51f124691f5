//! Node URLs and node errors cut down for logs: an RPC URL often carries an
//! API key in its path or query.

use super::*;

/// `scheme://host[:port]` of a URL, without path, query or credentials.
pub(in crate::local) fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or("");
    format!("{scheme}://{host}")
}

/// `text` with every URL in it (`scheme://` up to a space, quote, bracket or
/// comma) cut down by [`redact`].
pub(super) fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme's characters are ASCII, so their count is their length.
        let scheme = rest[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .count();
        let start = at - scheme;
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || "\"'()<>[]{},".contains(c))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..start]);
        out.push_str(&redact(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A node's error as text, its sources included, with every URL cut to
/// `scheme://host[:port]`: node URLs often carry an API key in their path or
/// query, and the transport's errors name the URL they failed on.
#[derive(Debug)]
pub(super) struct RpcFailure(pub(super) String);

impl RpcFailure {
    pub(super) fn new(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(e) = source {
            // Many errors repeat their source's message in their own.
            let message = e.to_string();
            if !text.contains(&message) {
                text.push_str(": ");
                text.push_str(&message);
            }
            source = e.source();
        }
        Self(redact_urls(&text))
    }
}

impl fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RpcFailure {}

/// `rpc_url` as an `http` or `https` URL, for [`HttpTransport`]; `None` for
/// any other scheme or text that is no URL. Like alloy's connection strings,
/// `localhost:PORT` and a bare socket address mean plain http.
pub(super) fn http_url(rpc_url: &str) -> Option<Url> {
    let rpc_url = rpc_url.trim();
    let url = if rpc_url.starts_with("localhost:") || rpc_url.parse::<SocketAddr>().is_ok() {
        Url::parse(&format!("http://{rpc_url}"))
    } else {
        Url::parse(rpc_url)
    };
    url.ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
}

pub(super) fn backend(e: impl std::error::Error + 'static) -> LedgerError {
    LedgerError::Backend(Box::new(RpcFailure::new(&e)))
}

pub(super) fn rpc(e: impl std::error::Error + 'static) -> ChainLedgerError {
    ChainLedgerError::Rpc(Box::new(RpcFailure::new(&e)))
}
