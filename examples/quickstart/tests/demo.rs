//! The README's main command, `cargo run -p quickstart`: it builds, serves,
//! makes its demo purchase offline and prints the receipt.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::Read,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Kills the quickstart if the test ends first.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn quickstart_buys_once_and_prints_the_receipt() {
    // Cargo builds the binary (with the workspace's features) before this
    // test runs: no nested build.
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_quickstart"));

    let child = Command::new(&binary)
        .env("QUICKSTART_EXIT_AFTER_DEMO", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = Guard(child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the quickstart did not exit within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    guard
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    guard
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "quickstart failed: {stderr}\n{stdout}");

    assert!(
        stdout.contains("Server listening on http://127.0.0.1:"),
        "{stdout}"
    );
    assert!(stdout.contains("402 challenge"), "{stdout}");
    assert!(stdout.contains("\"amount\": \"1000\""), "{stdout}");
    assert!(stdout.contains("Receipt"), "{stdout}");
    assert!(stdout.contains("\"success\": true"), "{stdout}");
    assert!(stdout.contains("HTTP 200"), "{stdout}");
    assert!(
        stdout.contains("999000 atomic units"),
        "the buyer must pay exactly 1000: {stdout}"
    );
}
