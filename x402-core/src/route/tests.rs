use super::*;

fn m(pattern: &str, path: &str) -> Option<Vec<(String, String)>> {
    PathPattern::parse(pattern).unwrap().matches(path)
}

#[test]
fn literal_and_normalised() {
    assert!(m("/weather", "/weather").is_some());
    for spelling in [
        "/Weather",
        "/weather/",
        "//weather",
        "/w%65ather",
        "\\weather",
        "/x/../weather",
        "/./weather",
        "/weather?x=1",
    ] {
        assert!(m("/weather", spelling).is_some(), "{spelling}");
    }
    assert!(m("/weather", "/weathers").is_none());
    assert!(m("/weather", "/weather/x").is_none());
    assert!(m("/", "/").is_some());
}

#[test]
fn params_and_wildcards() {
    assert_eq!(
        m("/users/:id", "/users/42").unwrap(),
        vec![("id".into(), "42".into())]
    );
    assert_eq!(
        m("/users/{id}/x", "/users/42/x").unwrap(),
        vec![("id".into(), "42".into())]
    );
    assert_eq!(
        m("/users/[id]", "/users/7").unwrap(),
        vec![("id".into(), "7".into())]
    );
    assert!(m("/users/:id", "/users").is_none());
    assert!(m("/api/*", "/api").is_some());
    assert!(m("/api/*", "/api/a/b/c").is_some());
    assert!(m("/api/*/x", "/api/a/x").is_some());
    assert!(m("/api/*/x", "/api/a/b/x").is_none());
    assert_eq!(
        m("/files/{*path}", "/files/a/b").unwrap(),
        vec![("path".into(), "a/b".into())]
    );
    assert_eq!(
        PathPattern::parse("/u/*/x/:id").unwrap().template(),
        "/u/:var1/x/:id"
    );
}

#[test]
fn bad_patterns() {
    assert!(PathPattern::parse("weather").is_err());
    assert!(PathPattern::parse("/a/:").is_err());
    assert!(PathPattern::parse("/a/{*rest}/b").is_err());
}

#[test]
fn percent_decoding_is_total() {
    assert_eq!(percent_decode("%"), "%");
    assert_eq!(percent_decode("%4"), "%4");
    assert_eq!(percent_decode("%zz"), "%zz");
    assert_eq!(percent_decode("a%2Fb"), "a/b");
    assert_eq!(percent_decode("%ff"), "\u{fffd}");
}

#[test]
fn head_matches_get_routes() {
    let r = Route::get("/x");
    assert!(r.matches(&Method::HEAD, "/x").is_some());
    assert!(r.matches(&Method::POST, "/x").is_none());
    assert!(Route::any("/x").matches(&Method::PATCH, "/x").is_some());
}
