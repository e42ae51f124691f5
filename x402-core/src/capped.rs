//! Bounded reads and texts for HTTP clients that talk to other servers
//! (facilitators, Solana nodes): an answer is never read past a limit, and a
//! message quoted from one never grows a log line past one.

/// Reads `response`'s body up to `max` bytes; the flag says whether it was
/// cut.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = max.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(chunk.get(..room).unwrap_or_default());
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// At most `max` characters of `text`, with `…` when it was cut.
pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
