//! Path patterns, and how a careful paywall reads a path.

use std::borrow::Cow;

/// A parsed path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    raw: String,
    segments: Vec<Segment>,
}

/// One segment of a [`PathPattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Percent-decoded and ASCII-lowercased.
    Literal(String),
    /// One segment.
    Param(String),
    /// The rest of the path, possibly nothing.
    Rest(String),
}

/// A path pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid route pattern {pattern:?}: {reason}")]
pub struct PatternError {
    pattern: String,
    reason: &'static str,
}

impl PatternError {
    /// The pattern as written.
    pub(crate) fn pattern(&self) -> &str {
        &self.pattern
    }
}

impl PathPattern {
    /// Parses a pattern such as `/users/:id/*`.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let err = |reason| PatternError {
            pattern: pattern.to_owned(),
            reason,
        };
        if !pattern.starts_with('/') {
            return Err(err("must start with '/'"));
        }
        let parts: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
        let mut segments = Vec::with_capacity(parts.len());
        let mut wildcards = 0;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let seg = if *part == "*" {
                wildcards += 1;
                if last {
                    Segment::Rest(format!("var{wildcards}"))
                } else {
                    Segment::Param(format!("var{wildcards}"))
                }
            } else if let Some(name) = part.strip_prefix("{*").and_then(|p| p.strip_suffix('}')) {
                if !last {
                    return Err(err("a rest segment must come last"));
                }
                Segment::Rest(name.to_owned())
            } else if let Some(name) = part
                .strip_prefix(':')
                .or_else(|| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
                .or_else(|| part.strip_prefix('[').and_then(|p| p.strip_suffix(']')))
            {
                if name.is_empty() {
                    return Err(err("a parameter needs a name"));
                }
                Segment::Param(name.to_owned())
            } else {
                Segment::Literal(normalize_segment(part))
            };
            segments.push(seg);
        }
        Ok(Self {
            raw: pattern.to_owned(),
            segments,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The pattern in `:param` syntax (`*` segments become `:var1`, ...), as
    /// the bazaar extension's `routeTemplate`.
    pub fn template(&self) -> String {
        let mut out = String::new();
        for seg in &self.segments {
            out.push('/');
            match seg {
                Segment::Literal(l) => out.push_str(l),
                Segment::Param(n) | Segment::Rest(n) => {
                    out.push(':');
                    out.push_str(n);
                }
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        out
    }

    pub(crate) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether a parameter or wildcard could take part of a path.
    pub(crate) fn has_variables(&self) -> bool {
        self.segments
            .iter()
            .any(|s| !matches!(s, Segment::Literal(_)))
    }

    /// Whether segments (decoded and ASCII-lowercased) match, without
    /// binding parameters. A parameter takes any one segment, even an empty
    /// one.
    pub(crate) fn covers(&self, segs: &[Cow<'_, str>]) -> bool {
        self.covers_each(segs.iter())
    }

    /// [`covers`](Self::covers), the segments taken one by one.
    pub(crate) fn covers_each<S: AsRef<str>>(&self, mut segs: impl Iterator<Item = S>) -> bool {
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => match segs.next() {
                    Some(s) if s.as_ref() == l.as_str() => {}
                    _ => return false,
                },
                Segment::Param(_) => {
                    if segs.next().is_none() {
                        return false;
                    }
                }
                Segment::Rest(_) => return true,
            }
        }
        segs.next().is_none()
    }

    /// Matches a request path, returning the bound parameters.
    pub fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let segs = normalize_path(path);
        let mut params = Vec::new();
        let mut i = 0;
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => {
                    if segs.get(i)?.as_ref() != l.as_str() {
                        return None;
                    }
                    i += 1;
                }
                Segment::Param(n) => {
                    params.push((n.clone(), segs.get(i)?.to_string()));
                    i += 1;
                }
                Segment::Rest(n) => {
                    let rest = segs.get(i..).unwrap_or_default().join("/");
                    params.push((n.clone(), rest));
                    return Some(params);
                }
            }
        }
        (i == segs.len()).then_some(params)
    }
}

fn normalize_segment(s: &str) -> String {
    percent_decode(s).to_ascii_lowercase()
}

/// Splits a request path into normalised segments: percent-decoded,
/// ASCII-lowercased, `\` read as `/`, empty and `.` segments dropped, `..`
/// resolved. A path that needs none of that (the common case) is split
/// without copying.
fn normalize_path(path: &str) -> Vec<Cow<'_, str>> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let clean = path
        .bytes()
        .all(|b| b.is_ascii() && b != b'%' && b != b'\\' && !b.is_ascii_uppercase());
    let mut out = Vec::new();
    if clean {
        for seg in path.split('/') {
            push_segment(&mut out, Cow::Borrowed(seg));
        }
    } else {
        let decoded = percent_decode(path).replace('\\', "/");
        for seg in decoded.split('/') {
            push_segment(&mut out, Cow::Owned(seg.to_ascii_lowercase()));
        }
    }
    out
}

fn push_segment<'a>(out: &mut Vec<Cow<'a, str>>, seg: Cow<'a, str>) {
    match seg.as_ref() {
        "" | "." => {}
        ".." => {
            out.pop();
        }
        _ => out.push(seg),
    }
}

/// Decodes `%XX` escapes (invalid ones are kept as they are; invalid UTF-8
/// becomes U+FFFD).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                // Both digits are < 16, so the value fits in a byte.
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
