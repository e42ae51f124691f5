//! A `redis-server` a test owns, on a free port: for tests that stop, pause
//! or restart Redis, or that read its server-wide statistics.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::require;

/// A `redis-server` this test owns; killed when dropped, even on panic.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    stopped: bool,
}

impl RedisServer {
    /// Starts `redis-server` on `port` and waits until it answers `PING`.
    /// Fails (panics, in one line) when `redis-server` is not on the `PATH`:
    /// [`require::redis_server`].
    #[track_caller]
    pub fn start(port: u16) -> Self {
        require::redis_server();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("these tests need redis-server on the PATH: {e}"));
        let server = Self {
            child,
            port,
            stopped: false,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut conn) = TcpStream::connect(("127.0.0.1", self.port)) {
                let mut reply = [0u8; 7];
                if conn.write_all(b"PING\r\n").is_ok()
                    && conn.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends `signal` (`-STOP`, `-CONT`, ...) to the server.
    pub fn signal(&mut self, signal: &str) {
        self.stopped = signal == "-STOP";
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} failed");
    }

    /// Kills the server and waits for it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Resume a paused server, then kill it. (`Child::kill` does
        // nothing to a child already reaped.)
        if self.stopped {
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on (for now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// How many script calls (`EVALSHA`) the server on `port` has run since it
/// started, from its `INFO commandstats` (read over a connection of its own).
pub fn script_calls(port: u16) -> u64 {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"INFO commandstats\r\n").unwrap();
    // A bulk string: `$<length>\r\n<text>\r\n`.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        conn.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let length: usize = std::str::from_utf8(&head[1..head.len() - 2])
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("INFO answered {head:?}"));
    let mut text = vec![0u8; length];
    conn.read_exact(&mut text).unwrap();
    String::from_utf8(text)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}
