use http::Method;
use proptest::prelude::*;

use super::*;
use crate::route::Route;

/// The routes every test here protects, in this order.
fn routes() -> Vec<Route> {
    vec![
        Route::get("/report"),
        Route::get("/weather/:city"),
        Route::get("/users/:id/profile"),
        Route::get("/files/*"),
        Route::post("/jobs/{id}/run"),
    ]
}

fn find(path: &str, template: Option<&str>) -> Lookup<String> {
    find_as(&Method::GET, path, template)
}

fn find_as(method: &Method, path: &str, template: Option<&str>) -> Lookup<String> {
    let routes = routes();
    named(lookup(&routes, |r| r, method, path, template, None))
}

/// A lookup's route by its pattern.
fn named(found: Lookup<&Route>) -> Lookup<String> {
    match found {
        Lookup::Free => Lookup::Free,
        Lookup::Protected(r) => Lookup::Protected(r.pattern().to_owned()),
        Lookup::Ambiguous(r) => Lookup::Ambiguous(r.pattern().to_owned()),
    }
}

fn protected(pattern: &str) -> Lookup<String> {
    Lookup::Protected(pattern.to_owned())
}

fn ambiguous(pattern: &str) -> Lookup<String> {
    Lookup::Ambiguous(pattern.to_owned())
}

#[test]
fn plain_paths_find_their_route() {
    assert_eq!(find("/report", None), protected("/report"));
    assert_eq!(find("/weather/paris", None), protected("/weather/:city"));
    assert_eq!(
        find("/users/42/profile", None),
        protected("/users/:id/profile")
    );
    assert_eq!(find("/files", None), protected("/files/*"));
    assert_eq!(find("/files/a/b/c", None), protected("/files/*"));
    assert_eq!(
        find_as(&Method::POST, "/jobs/7/run", None),
        protected("/jobs/{id}/run")
    );
    assert_eq!(
        find_as(&Method::HEAD, "/weather/paris", None),
        protected("/weather/:city")
    );
    for free in [
        "/",
        "/health",
        "/reports",
        "/weather",
        "/weather/",
        "/users/42",
        "/jobs/7/run",
    ] {
        assert_eq!(find(free, None), Lookup::Free, "{free}");
    }
    assert_eq!(find_as(&Method::POST, "/report", None), Lookup::Free);
}

#[test]
fn the_issues_spellings_never_pass() {
    // Each reaches a paid handler on axum or actix-web (probed on both).
    for (path, route) in [
        ("/weather/..", "/weather/:city"),
        ("/weather/%2e%2e", "/weather/:city"),
        ("/weather/%2E%2E", "/weather/:city"),
        ("/weather/.", "/weather/:city"),
        ("/weather/a%2Fb", "/weather/:city"),
        ("/weather/a%5Cb", "/weather/:city"),
        ("/weather/a\\b", "/weather/:city"),
        ("/users/../profile", "/users/:id/profile"),
        ("/files/a/../..", "/files/*"),
    ] {
        assert_eq!(find(path, None), ambiguous(route), "{path}");
    }
    for (path, route) in [
        ("/users//profile", "/users/:id/profile"),
        ("/w%65ather/paris", "/weather/:city"),
        ("/Weather/Paris", "/weather/:city"),
        ("/weather/paris;x=1", "/weather/:city"),
        ("/weather/paris/", "/weather/:city"),
        ("//weather//paris", "/weather/:city"),
        ("/REPORT", "/report"),
        ("/rep%6Frt", "/report"),
        ("/x/../report", "/report"),
        ("/report/.", "/report"),
        ("/report\\", "/report"),
        ("/%2e/report", "/report"),
    ] {
        assert_eq!(find(path, None), protected(route), "{path}");
    }
}

#[test]
fn dots_behind_other_separators_are_seen() {
    // A router reading `\` as `/` and then resolving dots serves /report.
    assert_ne!(find("/weather/paris\\..\\..\\report", None), Lookup::Free);
    // Plain dots resolved, encoded ones kept: /weather/x.
    assert_ne!(find("/weather/x/%2e%2e/..", None), Lookup::Free);
    // A separator decoded then dots resolved: /report.
    assert_ne!(find("/a%2F..%2Freport", None), Lookup::Free);
    assert_ne!(find("/a/%2e%2e%2freport", None), Lookup::Free);
}

#[test]
fn the_routers_template_decides_first() {
    // axum dispatched /weather/.. on /weather/{city}: priced, not ambiguous.
    assert_eq!(
        find("/weather/..", Some("/weather/{city}")),
        protected("/weather/:city")
    );
    assert_eq!(
        find("/api/x", Some("/files/{*path}")),
        protected("/files/*")
    );
    assert_eq!(
        find("/anything", Some("/files/{tail:.*}")),
        protected("/files/*")
    );
    assert_eq!(
        find("/x", Some("/users/{id:\\d+}/profile")),
        protected("/users/:id/profile")
    );
    // A template no route covers leaves the decision to the path.
    assert_eq!(find("/report", Some("/{page}")), protected("/report"));
    assert_eq!(find("/health", Some("/health")), Lookup::Free);
}

#[test]
fn templates_cover_only_what_the_pattern_matches() {
    let covers = |pattern: &str, template: &str| {
        covers_template(&PathPattern::parse(pattern).unwrap(), template)
    };
    assert!(covers("/weather/:city", "/weather/{city}"));
    assert!(covers("/Weather/:city", "/weather/{name}"));
    assert!(covers("/weather/:city", "/weather/paris"));
    assert!(covers("/api/*", "/api/users/{id}"));
    assert!(covers("/api/*", "/api/{*rest}"));
    assert!(covers("/api/*", "/api"));
    assert!(covers("/caf%C3%A9", "/caf\u{e9}"));
    assert!(!covers("/weather/paris", "/weather/{city}"));
    assert!(!covers("/weather/:city", "/weather/{*rest}"));
    assert!(!covers("/weather/:city", "/weather/{tail}*"));
    assert!(!covers("/weather/:city", "/weather"));
    assert!(!covers("/weather/:city", "/weather/{city}/x"));
    assert!(!covers("/report", "/reports"));
}

/// A router model: how a framework reads a raw path before matching it.
#[derive(Debug, Clone, Copy)]
enum Model {
    /// axum (matchit): the raw path; literals exact; a parameter takes one
    /// segment, even an empty one.
    Raw,
    /// actix-web: every escape decoded but `%2F`, `%25` and `%2B`, then as
    /// `Raw`.
    Requoted,
    /// A cleaning router: everything decoded, `\` read as `/`, dots
    /// resolved, empty segments dropped, trailing slash ignored.
    Cleaned,
}

fn model_segments(model: Model, path: &str) -> Vec<String> {
    let text = match model {
        Model::Raw => path.to_owned(),
        Model::Requoted => {
            let mut out = String::new();
            let mut rest = path;
            while let Some(i) = rest.find('%') {
                out.push_str(&rest[..i]);
                let escape = rest.get(i..i + 3).unwrap_or(&rest[i..]);
                let keep = ["%2F", "%2f", "%25", "%2B", "%2b"].contains(&escape);
                if keep || escape.len() < 3 {
                    out.push_str(escape);
                } else {
                    out.push_str(&percent_decode(escape));
                }
                rest = &rest[i + escape.len()..];
            }
            out.push_str(rest);
            out
        }
        Model::Cleaned => percent_decode(path).replace('\\', "/"),
    };
    let mut segments: Vec<String> = Vec::new();
    for s in text.split('/').skip(1) {
        match (model, s) {
            (Model::Cleaned, "" | ".") => {}
            (Model::Cleaned, "..") => {
                segments.pop();
            }
            _ => segments.push(s.to_owned()),
        }
    }
    segments
}

/// Whether a model dispatches `path` to `pattern` (in the model's own,
/// case-sensitive terms).
fn model_dispatches(model: Model, pattern: &str, path: &str) -> bool {
    let segments = model_segments(model, path);
    let pattern: Vec<&str> = pattern.split('/').skip(1).collect();
    for (i, p) in pattern.iter().enumerate() {
        if *p == "*" && i + 1 == pattern.len() {
            return true;
        }
        let Some(s) = segments.get(i) else {
            return false;
        };
        let last = i + 1 == pattern.len();
        if p.starts_with(':') || p.starts_with('{') {
            // matchit: a parameter at the end takes at least one byte.
            if last && s.is_empty() {
                return false;
            }
        } else if p != s {
            return false;
        }
    }
    segments.len() == pattern.len()
}

fn segment() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "report",
        "REPORT",
        "rep%6frt",
        "weather",
        "Weather",
        "w%65ather",
        "paris",
        "users",
        "42",
        "profile",
        "files",
        "a",
        "",
        ".",
        "..",
        "%2e",
        "%2E",
        "%2e%2e",
        ".%2e",
        "%2E.",
        "a%2Fb",
        "a%2fb",
        "%2f",
        "a%5Cb",
        "a%5cb",
        "a\\b",
        "\\",
        "..\\..",
        "x;y=1",
        ";",
        "%41",
        "%",
        "%zz",
        "%25",
        "%2e%2e%2f",
        "%c3%a9",
    ])
    .prop_map(str::to_owned)
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 0..7).prop_map(|segments| format!("/{}", segments.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Whatever a model router would dispatch to a protected route is never
    /// free.
    #[test]
    fn no_router_model_reaches_a_route_for_free(path in path()) {
        for route in routes().iter().filter(|r| r.method() == Some(&Method::GET)) {
            for model in [Model::Raw, Model::Requoted, Model::Cleaned] {
                if model_dispatches(model, route.pattern(), &path) {
                    prop_assert_ne!(
                        find(&path, None),
                        Lookup::Free,
                        "{:?} dispatches {} to {}", model, path, route.pattern()
                    );
                }
            }
        }
    }

    /// A clean path (no escapes, backslashes, dot or empty segments) is
    /// never refused as ambiguous, and is protected exactly when the
    /// routes match it.
    #[test]
    fn clean_paths_are_never_ambiguous(
        segments in prop::collection::vec(
            prop::sample::select(vec!["report", "weather", "paris", "users", "42", "profile", "files", "x"]),
            0..5,
        )
    ) {
        let path = format!("/{}", segments.join("/"));
        let found = find(&path, None);
        prop_assert!(!matches!(found, Lookup::Ambiguous(_)), "{}", path);
        let matched = routes()
            .iter()
            .find(|r| r.matches(&Method::GET, &path).is_some())
            .map(|r| r.pattern().to_owned());
        prop_assert_eq!(found, matched.map_or(Lookup::Free, Lookup::Protected));
    }
}

fn template() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        segment(),
        Just("{id}".to_owned()),
        Just("{*rest}".to_owned()),
        Just(":id".to_owned()),
        Just("{tail}*".to_owned()),
        Just("{x:.*}".to_owned()),
        Just("*".to_owned()),
    ];
    // Past `MAX_READ_PARTS` parts as well, where it is read per route.
    prop::collection::vec(part, 0..20).prop_map(|parts| format!("/{}", parts.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// A template read once finds the route that reading it against each
    /// route in turn finds.
    #[test]
    fn a_template_read_once_finds_what_each_route_finds(template in template()) {
        let routes = routes();
        for method in [Method::GET, Method::POST] {
            let expected = routes
                .iter()
                .find(|r| {
                    r.allows(&method)
                        && r.pattern.as_ref().is_ok_and(|p| covers_template(p, &template))
                })
                .map_or(Lookup::Free, |r| protected(r.pattern()));
            // A path no route covers: only the template can protect it.
            prop_assert_eq!(find_as(&method, "/nothing-here", Some(&template)), expected);
        }
    }
}

/// What `decoded_eq` must answer: the raw segment decoded, then compared
/// ignoring ASCII case, with no shortcut.
fn decoded_eq_plainly(raw: &str, literal: &str) -> bool {
    percent_decode(raw).eq_ignore_ascii_case(literal)
}

#[test]
fn a_segment_compares_as_decoded_whatever_its_first_byte_and_length() {
    let raws = [
        "",
        "a",
        "A",
        "%61",
        "%41bc",
        "abc",
        "ABC",
        "%",
        "%6",
        "%zz",
        "%ff",
        "%FF%FE",
        "%e2%82%ac",
        "€",
        "é",
        "%C3%A9",
        "x%2Fy",
        "%2f",
        "session",
        "SESSION",
        "%73ession",
        "demo",
        "dem%6F",
    ];
    let literals = [
        "",
        "a",
        "abc",
        "%",
        "%6",
        "%zz",
        "\u{fffd}",
        "\u{fffd}\u{fffd}",
        "€",
        "é",
        "x/y",
        "/",
        "session",
        "demo",
        "%61",
    ];
    for raw in raws {
        for literal in literals {
            assert_eq!(
                decoded_eq(raw, literal),
                decoded_eq_plainly(raw, literal),
                "{raw:?} against {literal:?}"
            );
        }
    }
}

proptest! {
    #[test]
    fn decoded_eq_is_decoding_then_comparing(
        raw in "(%[0-9a-fA-F]{2}|%[g-z]?|[a-zA-Z/é€]){0,6}",
        literal in "([a-zA-Z/é€%\u{fffd}]){0,4}",
    ) {
        prop_assert_eq!(decoded_eq(&raw, &literal), decoded_eq_plainly(&raw, &literal));
        // A literal as a route stores it: decoded and lowercased.
        let stored = percent_decode(&raw).to_ascii_lowercase();
        prop_assert!(decoded_eq(&raw, &stored));
    }
}

/// `find_as`, through `memo`.
fn find_remembered(
    memo: &TemplateMemo,
    method: &Method,
    path: &str,
    template: Option<&str>,
) -> Lookup<String> {
    let routes = routes();
    match lookup(&routes, |r| r, method, path, template, Some(memo)) {
        Lookup::Free => Lookup::Free,
        Lookup::Protected(r) => Lookup::Protected(r.pattern().to_owned()),
        Lookup::Ambiguous(r) => Lookup::Ambiguous(r.pattern().to_owned()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// A remembered template finds what working it out finds, the first
    /// time and every time after, whatever else fills the memo (one memo
    /// serves every case: its slots fill, and templates meet in them).
    #[test]
    fn a_remembered_template_finds_what_working_it_out_finds(
        template in template(),
        path in path(),
        post in any::<bool>(),
    ) {
        static MEMO: std::sync::OnceLock<TemplateMemo> = std::sync::OnceLock::new();
        let memo = MEMO.get_or_init(TemplateMemo::new);
        let method = if post { Method::POST } else { Method::GET };
        let fresh = find_as(&method, &path, Some(&template));
        for _ in 0..2 {
            prop_assert_eq!(
                find_remembered(memo, &method, &path, Some(&template)),
                fresh.clone(),
                "{} {}", method, template
            );
        }
    }
}

/// More templates than slots, under two methods, one too long to keep:
/// each is answered as without the memo, the first time and after, and the
/// memo holds at most one entry a slot.
#[test]
fn a_full_memo_answers_as_none() {
    let memo = TemplateMemo::new();
    let mut templates: Vec<String> = (0..3 * TEMPLATE_MEMO_SLOTS)
        .map(|i| match i % 3 {
            0 => format!("/weather/{{city{i}}}"),
            1 => format!("/report{i}"),
            _ => format!("/jobs/{{id}}/run/{i}"),
        })
        .collect();
    templates.extend([
        "/report".into(),
        "/weather/{city}".into(),
        "/jobs/{id}/run".into(),
    ]);
    templates.push(format!("/files/{}", "x".repeat(TEMPLATE_MEMO_LEN)));
    for round in 0..2 {
        for template in &templates {
            for method in [Method::GET, Method::POST] {
                assert_eq!(
                    find_remembered(&memo, &method, "/unrelated/path", Some(template)),
                    find_as(&method, "/unrelated/path", Some(template)),
                    "round {round}: {method} {template}"
                );
            }
        }
    }
    let held = memo
        .slots
        .iter()
        .filter_map(|s| s.get())
        .collect::<Vec<_>>();
    assert_eq!(held.len(), TEMPLATE_MEMO_SLOTS, "every slot filled");
    assert!(held.iter().all(|r| r.template.len() <= TEMPLATE_MEMO_LEN));
    // The routes' own templates: GET /report and /weather/{city}
    // protected, POST /jobs/{id}/run protected, the wrong method free.
    assert_eq!(
        find_remembered(&memo, &Method::GET, "/x", Some("/weather/{city}")),
        protected("/weather/:city")
    );
    assert_eq!(
        find_remembered(&memo, &Method::POST, "/x", Some("/jobs/{id}/run")),
        protected("/jobs/{id}/run")
    );
    assert_eq!(
        find_remembered(&memo, &Method::GET, "/x", Some("/jobs/{id}/run")),
        Lookup::Free
    );
}

/// Paths built from the bytes that change how routers read a path, in
/// any order: separators at either end or doubled, dots, escapes,
/// backslashes, capitals.
fn any_path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "/", "/", "/", "a", "report", "weather", "files", "Report", ".", "..", "%2e", "%2F",
            "%5c", "\\", "x", "42",
        ]),
        0..10,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The shortcut for paths with one reading finds what working out
    /// every reading finds, for every method.
    #[test]
    fn plain_paths_find_what_every_reading_finds(
        path in prop_oneof![path(), any_path()],
        method in prop::sample::select(vec![Method::GET, Method::POST, Method::HEAD]),
    ) {
        let routes = routes();
        let found = named(lookup(&routes, |r| r, &method, &path, None, None));
        let worked_out = named(by_readings(&routes, |r| r, &method, &path));
        prop_assert_eq!(found, worked_out, "{} {}", method, path);
    }
}

#[test]
fn the_shortcut_takes_only_paths_with_one_reading() {
    fn plain(path: &str) -> Option<Vec<&str>> {
        plain_segments(path).map(Iterator::collect)
    }
    assert_eq!(plain("/weather/paris"), Some(vec!["weather", "paris"]));
    assert_eq!(plain("/weather/paris//"), Some(vec!["weather", "paris"]));
    assert_eq!(plain("report"), Some(vec!["report"]));
    for path in [
        "",
        "/",
        "//",
        "//report",
        "/weather//paris",
        "/weather/./paris",
        "/weather/..",
        "/Weather/paris",
        "/weather/a%2Fb",
        "/weather\\paris",
        "/./",
        ".",
    ] {
        assert_eq!(plain(path), None, "{path:?}");
    }
}
