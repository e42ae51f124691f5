//! Node and facilitator URLs cut down for logs and errors: an RPC URL often
//! carries an API key in its path, query or credentials.

/// `scheme://host[:port]` of a URL, without credentials, path, query or
/// fragment.
pub(crate) fn url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or("");
    format!("{scheme}://{host}")
}

/// `text` with every URL in it (`scheme://` up to a space, quote, bracket or
/// comma) cut down by [`url`]: a node's or a transport's error may quote
/// the URL it failed on.
pub(crate) fn urls_in(text: &str) -> String {
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
        out.push_str(&url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// An error and its sources as one line (`error: source: source`), a source
/// left out when its message is already in the text (many errors repeat
/// their source's).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let message = e.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = e.source();
    }
    text
}
