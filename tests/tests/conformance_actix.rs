//! The conformance suite against `x402_actix::PaywallLayer` over a whole
//! actix-web `App`, served by actix's own `HttpServer`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

x402_tests::conformance_tests!(x402_tests::actix::ActixAdapter);

/// The actix server runs on its own thread; it must stop when the test that
/// started it ends, not linger until the process exits.
#[test]
fn actix_server_stops_with_the_test_runtime() {
    use std::{
        net::TcpStream,
        time::{Duration, Instant},
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let base = runtime.block_on(async {
        let f = x402_tests::Fixture::new::<x402_tests::actix::ActixAdapter>().await;
        f.get("/free", &[]).await.assert_status(200);
        f.base.clone()
    });
    let address = base.trim_start_matches("http://").to_owned();
    assert!(
        TcpStream::connect(&address).is_ok(),
        "served while the test runs"
    );
    drop(runtime);

    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(&address).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{address} still served after the test ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
