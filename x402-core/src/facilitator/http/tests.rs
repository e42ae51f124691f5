use super::reply::*;
use super::*;
use http::StatusCode;

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status: StatusCode::from_u16(status).unwrap(),
        body: body.as_bytes().to_vec(),
        truncated: false,
        extension_responses: None,
    }
}

#[test]
fn reason_codes() {
    assert_eq!(
        reason_code("invalid_exact_evm_signature: bad"),
        Some("invalid_exact_evm_signature")
    );
    assert_eq!(reason_code("boom"), Some("boom"));
    assert_eq!(reason_code("Bad Request: x"), None);
    assert_eq!(reason_code("1abc"), None);
    assert_eq!(reason_code(""), None);
}

#[test]
fn access_statuses_are_not_verdicts() {
    let err = verify_reply(&reply(401, r#"{"error":"unauthorized"}"#)).unwrap_err();
    assert!(matches!(err, FacilitatorError::Status { status: 401, .. }));
    let v = verify_reply(&reply(401, r#"{"error":"invalid_api_key"}"#)).unwrap();
    assert_eq!(v.invalid_reason.as_deref(), Some("invalid_api_key"));
}

#[test]
fn urls() {
    let base = parse_base_url("https://u:p@f.example/api//?key=1").unwrap();
    assert_eq!(
        endpoint_url(&base, Endpoint::Verify).as_str(),
        "https://u:p@f.example/api/verify?key=1"
    );
    assert_eq!(redacted_url(&base), "https://f.example/api");
    assert!(parse_base_url("ftp://f.example").is_err());
    assert!(parse_base_url("not a url").is_err());
}

fn build(url: &str) -> Result<HttpFacilitator, HttpFacilitatorConfigError> {
    HttpFacilitator::builder(url).build()
}

#[test]
fn plain_http_is_for_loopback_only() {
    let accepted = [
        "https://facilitator.example",
        "HTTPS://FACILITATOR.EXAMPLE/api",
        "https://user:pw@203.0.113.7:8443/?key=1",
        "http://127.0.0.1:4022",
        "http://127.0.0.2",
        "http://127.255.255.254/x",
        "http://0x7f.1",
        "http://2130706433",
        "http://localhost:4022/facilitator",
        "HTTP://LOCALHOST",
        "http://[::1]:4022",
        "http://[0:0:0:0:0:0:0:1]",
        "http://[::ffff:127.0.0.1]",
        "http://user:pw@127.0.0.1/?key=1",
        "  http://127.0.0.1  ",
    ];
    for url in accepted {
        assert!(build(url).is_ok(), "{url} refused: {:?}", build(url).err());
    }
    let refused = [
        ("http://facilitator.example", "facilitator.example"),
        ("HTTP://Facilitator.Example/api", "facilitator.example"),
        ("http://127.0.0.1@evil.example", "evil.example"),
        ("http://localhost@evil.example/", "evil.example"),
        ("http://localhost.evil.example", "localhost.evil.example"),
        ("http://evil.localhost", "evil.localhost"),
        ("http://localhost.", "localhost."),
        ("http://127.0.0.1.evil.example", "127.0.0.1.evil.example"),
        ("http://128.0.0.1", "128.0.0.1"),
        ("http://10.0.0.5:4022", "10.0.0.5"),
        ("http://0.0.0.0", "0.0.0.0"),
        ("http://[::]", "[::]"),
        ("http://[::2]", "[::2]"),
        ("http://[::ffff:10.0.0.1]", "[::ffff:a00:1]"),
        ("http://[2001:db8::1]:80", "[2001:db8::1]"),
    ];
    for (url, host) in refused {
        match build(url) {
            Err(HttpFacilitatorConfigError::PlainHttp { host: got }) => {
                assert_eq!(got, host, "{url}");
            }
            other => panic!("{url}: expected PlainHttp, got {other:?}"),
        }
        assert!(
            HttpFacilitator::new(url).is_err(),
            "{url}: new() must refuse too"
        );
        let opted_in = HttpFacilitator::builder(url)
            .dangerous_allow_plain_http()
            .build();
        assert!(opted_in.is_ok(), "{url}: {:?}", opted_in.err());
    }
}

#[test]
fn the_plain_http_error_names_the_fix_and_no_secret() {
    let err = build("http://user:hunter2@facilitator.example/k/?apiKey=s3cret").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("facilitator.example"), "{text}");
    assert!(text.contains("https://"), "{text}");
    assert!(text.contains("dangerous_allow_plain_http()"), "{text}");
    let debug = format!("{err:?}");
    for shown in [&text, &debug] {
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret") && !shown.contains("user"),
            "{shown}"
        );
    }
}

#[test]
fn debug_hides_credentials_and_query() {
    let url = "https://user:hunter2@facilitator.example:8443/api/?apiKey=s3cret#frag";
    let builder = HttpFacilitator::builder(url);
    let debug = format!("{builder:?}");
    assert!(
        debug.contains("https://facilitator.example:8443/api"),
        "{debug}"
    );
    assert!(
        !debug.contains("hunter2") && !debug.contains("s3cret"),
        "{debug}"
    );
    let facilitator = build(&url.replace("#frag", "")).unwrap();
    let debug = format!("{facilitator:?}");
    assert!(
        debug.contains("https://facilitator.example:8443/api"),
        "{debug}"
    );
    assert!(
        !debug.contains("hunter2") && !debug.contains("s3cret") && !debug.contains("user"),
        "{debug}"
    );
}

#[test]
fn messages_are_truncated() {
    let long = "x".repeat(500);
    let FacilitatorError::Status {
        message: Some(m), ..
    } = reply(502, &long).status_error(None)
    else {
        panic!("expected a status error");
    };
    assert_eq!(m.chars().count(), MAX_LOG_MESSAGE_CHARS + 1);
}

#[test]
fn extension_responses_are_read_when_they_are_a_base64_json_object() {
    let mut r = reply(200, "{}");
    assert_eq!(sidechannel::read(Endpoint::Settle, &r), None);
    // base64 of {"bazaar":{"status":"success"}}, the example of bazaar.md.
    r.extension_responses = Some(http::HeaderValue::from_static(
        "eyJiYXphYXIiOnsic3RhdHVzIjoic3VjY2VzcyJ9fQ==",
    ));
    let read = sidechannel::read(Endpoint::Settle, &r).unwrap();
    assert_eq!(read["bazaar"]["status"], "success");
    // Not base64, not JSON, not an object: ignored (logged), never an error.
    for bad in ["%%%", "bm90IGpzb24=", "WzFd"] {
        r.extension_responses = Some(http::HeaderValue::from_static(bad));
        assert_eq!(sidechannel::read(Endpoint::Settle, &r), None, "{bad}");
    }
}
