//! The built binary against the server contract (`DESIGN.md` §9): prints
//! `Server listening on http://ADDR` once bound, answers `/health`, and
//! exits 0 after `POST /close` and on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

/// The server process; killed on drop if it is still running.
struct Process {
    child: Child,
    addr: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Starts the binary offline on a free port and waits for its
    /// `Server listening` line.
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_paid-api-actix"))
            .env_clear()
            .env("PORT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut process = Self {
            child,
            addr: String::new(),
        };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        process.addr = line
            .trim()
            .strip_prefix("Server listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        process
    }

    /// One HTTP/1.1 request, `Connection: close`; the whole response.
    fn request(&self, method: &str, path: &str) -> String {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    /// Waits up to 10 s for the process to exit.
    fn exit_status(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn post_close_answers_then_the_process_exits_0() {
    let mut server = Process::start();
    let health = server.request("GET", "/health");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.contains("\"status\":\"ok\""), "{health}");
    let challenge = server.request("GET", "/exact/evm/eip3009");
    assert!(challenge.starts_with("HTTP/1.1 402"), "{challenge}");

    let close = server.request("POST", "/close");
    assert!(close.starts_with("HTTP/1.1 200"), "{close}");
    assert!(close.contains("\"message\":\"closing\""), "{close}");
    assert!(server.exit_status().success());
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_process_with_exit_0() {
    let mut server = Process::start();
    let health = server.request("GET", "/health");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let kill = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(server.exit_status().success());
}

#[test]
fn the_binary_serves_discovery_openapi_and_metrics() {
    let server = Process::start();
    let document = server.request("GET", "/.well-known/x402");
    assert!(document.starts_with("HTTP/1.1 200"), "{document}");
    assert!(document.contains("\"discoveryVersion\":1"), "{document}");
    let api = server.request("GET", "/.well-known/x402/openapi.json");
    assert!(api.starts_with("HTTP/1.1 200"), "{api}");
    assert!(api.contains("\"openapi\":\"3.1.0\""), "{api}");

    let challenge = server.request("GET", "/exact/evm/eip3009");
    assert!(challenge.starts_with("HTTP/1.1 402"), "{challenge}");
    let metrics = server.request("GET", "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("x402_challenges_total{"), "{metrics}");
}
