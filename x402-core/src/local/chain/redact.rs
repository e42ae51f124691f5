//! Node URLs and node errors cut down for logs: an RPC URL often carries an
//! API key in its path or query.

use super::*;

pub(in crate::local) use crate::redact::{url as redact, urls_in as redact_urls};

/// A node's error as text, its sources included, with every URL cut to
/// `scheme://host[:port]`: node URLs often carry an API key in their path or
/// query, and the transport's errors name the URL they failed on.
#[derive(Debug)]
pub(super) struct RpcFailure(pub(super) String);

impl RpcFailure {
    pub(super) fn new(error: &(dyn std::error::Error + 'static)) -> Self {
        Self(redact_urls(&crate::redact::error_chain(error)))
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
