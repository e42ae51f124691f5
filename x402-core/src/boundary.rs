//! The protection boundary: which requests a paywall treats as protected.
//!
//! **A request is free only when no path a router could dispatch it on
//! matches a protected route.**
//!
//! A paywall and a router that disagree about which handler a request
//! reaches are a paywall that can be walked around. Routers read a request
//! path in different ways: axum's matches the raw, still percent-encoded
//! path (so `/weather/..` reaches `/weather/{city}` with `city = ".."`, and
//! `/users//profile` reaches `/users/{id}/profile` with an empty `id`);
//! actix-web's first decodes everything but `/`, `%` and `+` (so
//! `/w%65ather/paris` reaches `/weather/{city}`); others also decode `%2F`,
//! read `\` as `/` or resolve dot segments. The engine therefore decides with
//! two sources, and a request is protected when either says so:
//!
//! 1. **The router's own decision**, where the framework tells it: the route
//!    template that dispatched the request (axum's `MatchedPath`, actix-web's
//!    `match_pattern()`), passed in
//!    [`RequestView::route_template`](crate::route::RequestView::route_template).
//!    A protected route whose pattern covers that template prices the
//!    request. Adapters also hand the engine the path the client sent,
//!    before any nesting stripped a prefix.
//! 2. **Every reading of the path** a router could make: the raw segments
//!    (empty segments kept, then dropped), and, for a path whose meaning
//!    depends on the decoder, each combination of decoding `%2F` and `%5C`
//!    into separators, reading `\` as `/`, and resolving dot segments (plain
//!    ones only, or encoded ones too). Literal segments compare
//!    percent-decoded and ignoring ASCII case; a parameter matches any one
//!    segment, even an empty one; a wildcard matches the rest.
//!
//! A path whose meaning depends on the decoder (a segment that decodes to
//! `.` or `..`, an encoded `/` or `\`, or a raw `\`) and that some reading
//! matches to a route with a parameter or wildcard is answered **400
//! `ambiguous_path`**, unless the router's template settled which route it
//! is: whether a parameter swallowed a separator or a dot segment moved the
//! request elsewhere is exactly what depends on the decoder. Such a path
//! matching only literal routes is protected by the first one (402).
//!
//! A route bound to one handler ([`Engine::bind`](crate::Engine::bind))
//! needs none of this: every request that reaches its layer is that route's.
//!
//! ```
//! use http::{HeaderMap, Method, StatusCode, Uri};
//! use x402_core::{engine::Decision, route::RequestView, Engine, Offer, Route};
//! # use x402_core::facilitator::HttpFacilitator;
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!
//! let engine = Engine::builder(HttpFacilitator::new("http://127.0.0.1:4022")?)
//!     .route(Route::get("/weather/:city").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.001",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .build()?;
//! let (get, headers) = (Method::GET, HeaderMap::new());
//! let status = |path: &'static str, template: Option<&'static str>| {
//!     let engine = engine.clone();
//!     let (get, headers) = (get.clone(), headers.clone());
//!     async move {
//!         let uri = Uri::from_static(path);
//!         let view = RequestView::new(&get, &uri, &headers).route_template(template);
//!         match engine.process(view).await {
//!             Decision::Respond(response) => response.status(),
//!             _ => StatusCode::OK,
//!         }
//!     }
//! };
//! assert_eq!(status("/weather/paris", None).await, StatusCode::PAYMENT_REQUIRED);
//! assert_eq!(status("/Weather/Paris/", None).await, StatusCode::PAYMENT_REQUIRED);
//! assert_eq!(status("/weather/..", None).await, StatusCode::BAD_REQUEST);
//! assert_eq!(status("/weather/a%2Fb", None).await, StatusCode::BAD_REQUEST);
//! assert_eq!(status("/forecast/paris", None).await, StatusCode::OK);
//! // The router said which route took it: priced, not refused.
//! let axum = Some("/weather/{city}");
//! assert_eq!(status("/weather/..", axum).await, StatusCode::PAYMENT_REQUIRED);
//! # Ok(()) }
//! ```

use std::borrow::Cow;

use http::Method;

use crate::route::{percent_decode, PathPattern, Route, Segment};

/// Where a request falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup<T> {
    /// No route protects it.
    Free,
    /// This route protects it.
    Protected(T),
    /// Its meaning depends on the decoder, and under some reading this
    /// route's parameter or wildcard would take it.
    Ambiguous(T),
}

/// Finds the route protecting a request to `path` (its raw path, as the
/// client sent it), dispatched on `template` if the router said so. With a
/// `memo` (the engine's, for its route table), the route a template falls
/// to is worked out once per template and method.
pub(crate) fn lookup<'a, T>(
    routes: &'a [T],
    route: impl Fn(&T) -> &Route,
    method: &Method,
    path: &str,
    template: Option<&str>,
    memo: Option<&TemplateMemo>,
) -> Lookup<&'a T> {
    let candidates = || candidates(routes, &route, method);
    if let Some(template) = template {
        let covering = || {
            // Read once, for every route it is checked against.
            let mut parts = [TemplatePart::Param; MAX_READ_PARTS];
            let found = match read_template(template, &mut parts) {
                Some(read) => candidates().find(|(_, p)| covers_parts(p, read.iter().copied())),
                None => candidates().find(|(_, p)| covers_template(p, template)),
            };
            found.map(|(i, _)| i)
        };
        let found = match memo {
            Some(memo) => memo.get_or_find(method, template, covering),
            None => covering(),
        };
        if let Some(i) = found {
            return Lookup::Protected(&routes[i]);
        }
    }
    // Most paths have one reading, their segments as written: matched
    // without working out the readings or collecting the segments (1 400
    // instructions and an allocation for a free one, 300 this way).
    if let Some(segments) = plain_segments(path) {
        return match candidates().find(|(_, p)| p.covers_each(segments.clone())) {
            Some((i, _)) => Lookup::Protected(&routes[i]),
            None => Lookup::Free,
        };
    }
    by_readings(routes, route, method, path)
}

/// The routes of `routes` that allow `method`, with their index and
/// pattern.
fn candidates<'a, 'm, T, F: Fn(&T) -> &Route>(
    routes: &'a [T],
    route: F,
    method: &'m Method,
) -> impl Iterator<Item = (usize, &'a PathPattern)> + use<'a, 'm, T, F> {
    routes.iter().enumerate().filter_map(move |(i, r)| {
        let found = route(r);
        let pattern = found.pattern.as_ref().ok()?;
        found.allows(method).then_some((i, pattern))
    })
}

/// [`lookup`] on the path alone, every reading of it worked out.
fn by_readings<'a, T>(
    routes: &'a [T],
    route: impl Fn(&T) -> &Route,
    method: &Method,
    path: &str,
) -> Lookup<&'a T> {
    let readings = Readings::of(path);
    let mut segments = Vec::new();
    for reading in readings.iter() {
        reading.read(path, &mut segments);
        if let Some((i, pattern)) =
            candidates(routes, &route, method).find(|(_, p)| p.covers(&segments))
        {
            return if readings.decoder_dependent && pattern.has_variables() {
                Lookup::Ambiguous(&routes[i])
            } else {
                Lookup::Protected(&routes[i])
            };
        }
    }
    Lookup::Free
}

/// The segments of a path every router reads one way, as [`Readings`] would
/// give them: no `%`, no `\`, no `.` or `..` segment, no empty segment but
/// trailing ones, no ASCII capital (so that [`normalise`] would borrow each
/// segment as it is). `None` for any other path, whose readings are worked
/// out in full.
fn plain_segments(path: &str) -> Option<std::str::Split<'_, char>> {
    let body = path.trim_end_matches('/');
    let body = body.strip_prefix('/').unwrap_or(body);
    let bytes = body.as_bytes();
    // The path `/` (or empty) has one empty segment, which two readings
    // treat differently.
    if bytes.is_empty() {
        return None;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'%' | b'\\' | b'A'..=b'Z' => return None,
            b'/' => {
                if !plain_segment(&bytes[start..i]) {
                    return None;
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    plain_segment(&bytes[start..]).then(|| body.split('/'))
}

/// A segment that is neither empty nor a dot segment.
fn plain_segment(segment: &[u8]) -> bool {
    !matches!(segment, b"" | b"." | b"..")
}

/// The route of a table that each router template (with a method) falls
/// to, remembered: reading a template and comparing it with each route's
/// pattern took about 900 instructions of every protected request, and a
/// router hands the same few templates to all of them.
///
/// What it remembers is a function of the template's text, the method and
/// the route table alone, and an engine's table does not change once built,
/// so a remembered answer is the answer. Entries are matched on the whole
/// text, never a hash of it. It holds [`TEMPLATE_MEMO_SLOTS`] entries, each
/// written once: a template whose slot another holds (or one of more than
/// [`TEMPLATE_MEMO_LEN`] bytes, as an adapter that hands the path itself
/// might) is worked out every time, as without the memo. Reads take no
/// lock and write nothing that other cores read.
pub(crate) struct TemplateMemo {
    slots: Box<[std::sync::OnceLock<Remembered>]>,
}

/// Slots of a [`TemplateMemo`].
pub(crate) const TEMPLATE_MEMO_SLOTS: usize = 64;

/// The longest template a [`TemplateMemo`] remembers.
pub(crate) const TEMPLATE_MEMO_LEN: usize = 256;

struct Remembered {
    method: Method,
    template: Box<str>,
    route: Option<usize>,
}

impl TemplateMemo {
    pub(crate) fn new() -> Self {
        Self {
            slots: (0..TEMPLATE_MEMO_SLOTS)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
        }
    }

    /// The index of the route `template` falls to for `method`, as `find`
    /// says: remembered, or found and remembered if its slot is free.
    fn get_or_find(
        &self,
        method: &Method,
        template: &str,
        find: impl FnOnce() -> Option<usize>,
    ) -> Option<usize> {
        if template.len() > TEMPLATE_MEMO_LEN {
            return find();
        }
        let slot = &self.slots[slot_of(method, template)];
        if let Some(r) = slot.get() {
            if r.template.as_ref() == template && r.method == method {
                return r.route;
            }
            return find();
        }
        let route = find();
        // Another thread may fill the slot first, with this template or
        // another: either way, `route` is this template's answer.
        let _ = slot.set(Remembered {
            method: method.clone(),
            template: template.into(),
            route,
        });
        route
    }
}

/// A slot for a template and method: FNV-1a over the text and the method.
fn slot_of(method: &Method, template: &str) -> usize {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in method.as_str().as_bytes().iter().chain(template.as_bytes()) {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash as usize % TEMPLATE_MEMO_SLOTS
}

/// Whether `pattern` matches every path a router template matches: its
/// literals equal (decoded, ignoring ASCII case), a parameter of the pattern
/// over anything but a wildcard, and a wildcard of the pattern over the rest.
///
/// Templates are read in the syntax of axum (`{id}`, `{*rest}`) and
/// actix-web (`{id}`, `{id:regex}`, `{tail}*`), and the engine's own
/// (`:id`, `*`): a segment holding a `{` is a parameter, or a wildcard when
/// it is `{*name}`, ends with `*`, or carries a regex that may match `/`.
pub(crate) fn covers_template(pattern: &PathPattern, template: &str) -> bool {
    covers_parts(pattern, template_parts(template))
}

/// [`covers_template`] for a template already split into its parts.
fn covers_parts<'t>(
    pattern: &PathPattern,
    mut parts: impl Iterator<Item = TemplatePart<'t>>,
) -> bool {
    for segment in pattern.segments() {
        match segment {
            Segment::Rest(_) => return true,
            Segment::Param(_) => match parts.next() {
                Some(TemplatePart::Literal(_) | TemplatePart::Param) => {}
                Some(TemplatePart::Rest) | None => return false,
            },
            Segment::Literal(literal) => match parts.next() {
                Some(TemplatePart::Literal(raw)) if decoded_eq(raw, literal) => {}
                _ => return false,
            },
        }
    }
    parts.next().is_none()
}

/// The parts of a router template, in order (empty segments skipped).
fn template_parts(template: &str) -> impl Iterator<Item = TemplatePart<'_>> {
    template
        .split('/')
        .filter(|s| !s.is_empty())
        .map(TemplatePart::of)
}

/// How many parts of a router template [`lookup`] reads once; a template
/// with more is read again for each route.
const MAX_READ_PARTS: usize = 16;

/// `template`'s parts, read into `parts`; `None` when it has more.
fn read_template<'p, 't>(
    template: &'t str,
    parts: &'p mut [TemplatePart<'t>; MAX_READ_PARTS],
) -> Option<&'p [TemplatePart<'t>]> {
    let mut len = 0;
    for part in template_parts(template) {
        *parts.get_mut(len)? = part;
        len += 1;
    }
    Some(&parts[..len])
}

/// One segment of a router's template.
#[derive(Clone, Copy)]
enum TemplatePart<'a> {
    Literal(&'a str),
    Param,
    Rest,
}

impl<'a> TemplatePart<'a> {
    fn of(segment: &'a str) -> Self {
        if segment.starts_with(':') && segment.len() > 1 {
            return Self::Param;
        }
        if segment == "*" || segment.starts_with("{*") {
            return Self::Rest;
        }
        if !segment.contains('{') {
            return Self::Literal(segment);
        }
        // actix-web's tail segment `{tail}*`, and regexes that can cross a
        // `/` (`{tail:.*}`).
        let regex = segment.split_once(':').map(|(_, r)| r).unwrap_or_default();
        let crosses = regex.contains(['.', '/'])
            || ["\\W", "\\S", "\\D", "[^"]
                .iter()
                .any(|c| regex.contains(c));
        if segment.ends_with('*') || crosses {
            Self::Rest
        } else {
            Self::Param
        }
    }
}

/// Whether a raw segment, percent-decoded, is `literal` (already decoded
/// and ASCII-lowercased), ignoring ASCII case.
fn decoded_eq(raw: &str, literal: &str) -> bool {
    // Decoding never lengthens a segment, and leaves a first byte other
    // than `%` as it is: most literals of other routes differ there.
    if raw.len() < literal.len() {
        return false;
    }
    if let (Some(&r), Some(&l)) = (raw.as_bytes().first(), literal.as_bytes().first()) {
        if r != b'%' && !r.eq_ignore_ascii_case(&l) {
            return false;
        }
    }
    // A byte scan: segments are short, and `contains('%')` sets up a
    // searcher for each.
    if raw.bytes().any(|b| b == b'%') {
        percent_decode(raw).eq_ignore_ascii_case(literal)
    } else {
        raw.eq_ignore_ascii_case(literal)
    }
}

/// How dot segments are treated by one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dots {
    /// Kept as segments (a parameter can take them).
    Keep,
    /// `.` and `..` resolved as written; encoded ones kept.
    Plain,
    /// Resolved after decoding, encoded ones too.
    Decoded,
}

/// One way a router may read a path.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// `%2F` (and `%5C` with `backslash`) split segments.
    decode_separators: bool,
    /// `\` splits segments.
    backslash: bool,
    dots: Dots,
    /// Empty segments are dropped (else a parameter can take one).
    drop_empty: bool,
}

/// The readings a path needs, and whether its meaning depends on them.
#[derive(Debug)]
struct Readings {
    encoded_separator: bool,
    backslash: bool,
    dot_segment: bool,
    empty_segment: bool,
    decoder_dependent: bool,
}

impl Readings {
    fn of(path: &str) -> Self {
        let bytes = path.as_bytes();
        let has_percent = bytes.contains(&b'%');
        let encoded = |code: &[u8]| {
            has_percent
                && bytes
                    .windows(3)
                    .any(|w| w[0] == b'%' && w[1..].eq_ignore_ascii_case(code))
        };
        let encoded_slash = encoded(b"2f");
        let encoded_backslash = encoded(b"5c");
        let backslash = bytes.contains(&b'\\') || encoded_backslash;
        // Dots hidden behind `\` or an encoded separator count too.
        let decoded = if has_percent {
            Cow::Owned(percent_decode(path))
        } else {
            Cow::Borrowed(path)
        };
        let dot_segment = decoded.split(['/', '\\']).any(|s| s == "." || s == "..");
        let empty_segment = segments_of(path.trim_end_matches('/')).any(str::is_empty);
        Self {
            encoded_separator: encoded_slash || encoded_backslash,
            backslash,
            dot_segment,
            // Splitting on decoded separators can make empty segments too.
            empty_segment: empty_segment || encoded_slash || backslash || dot_segment,
            decoder_dependent: encoded_slash || backslash || dot_segment,
        }
    }

    /// The readings, the raw ones (as axum and actix-web read a path) first:
    /// where readings disagree, the route a router would pick comes first.
    fn iter(&self) -> impl Iterator<Item = Reading> + '_ {
        let choices = |present: bool| [false, true].into_iter().take(1 + usize::from(present));
        let dots: &[Dots] = if self.dot_segment {
            &[Dots::Keep, Dots::Plain, Dots::Decoded]
        } else {
            &[Dots::Keep]
        };
        choices(self.empty_segment).flat_map(move |drop_empty| {
            choices(self.encoded_separator).flat_map(move |decode_separators| {
                choices(self.backslash).flat_map(move |backslash| {
                    dots.iter().map(move |&dots| Reading {
                        decode_separators,
                        backslash,
                        dots,
                        drop_empty,
                    })
                })
            })
        })
    }
}

/// The raw segments of a path, after its leading `/`.
fn segments_of(path: &str) -> impl Iterator<Item = &str> {
    let mut parts = path.split('/');
    if path.starts_with('/') {
        parts.next();
    }
    parts
}

impl Reading {
    /// The path's segments under this reading, percent-decoded and
    /// ASCII-lowercased, with trailing empty segments dropped.
    fn read<'a>(&self, path: &'a str, out: &mut Vec<Cow<'a, str>>) {
        out.clear();
        for raw in segments_of(path) {
            if self.decode_separators && raw.contains('%') {
                let decoded = percent_decode(raw);
                let pieces = decoded.split(|c| c == '/' || (self.backslash && c == '\\'));
                for piece in pieces {
                    // Once decoded, a dot can no longer be told from an
                    // encoded one: both count as written.
                    self.push(out, piece == "." || piece == "..", || {
                        Cow::Owned(piece.to_ascii_lowercase())
                    });
                }
            } else if self.backslash && raw.contains('\\') {
                for piece in raw.split('\\') {
                    self.push(out, matches!(piece, "." | ".."), || normalise(piece));
                }
            } else {
                self.push(out, matches!(raw, "." | ".."), || normalise(raw));
            }
        }
        while out.last().is_some_and(|s| s.is_empty()) {
            out.pop();
        }
    }

    /// Adds one segment; `plain_dot` says it was written `.` or `..`.
    fn push<'a>(
        &self,
        out: &mut Vec<Cow<'a, str>>,
        plain_dot: bool,
        segment: impl FnOnce() -> Cow<'a, str>,
    ) {
        let segment = segment();
        let resolve = match self.dots {
            Dots::Keep => false,
            Dots::Plain => plain_dot,
            Dots::Decoded => true,
        };
        match segment.as_ref() {
            "" if self.drop_empty => {}
            "." if resolve => {}
            ".." if resolve => {
                out.pop();
            }
            _ => out.push(segment),
        }
    }
}

/// A raw segment percent-decoded and ASCII-lowercased, borrowed when that
/// changes nothing.
fn normalise(raw: &str) -> Cow<'_, str> {
    if raw.contains('%') {
        Cow::Owned(percent_decode(raw).to_ascii_lowercase())
    } else if raw.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(raw.to_ascii_lowercase())
    } else {
        Cow::Borrowed(raw)
    }
}

#[cfg(test)]
mod tests;
