//! A `redis-server` a test owns, on a free port: for tests that stop, pause
//! or restart Redis, or that read its server-wide statistics.

#![allow(dead_code, unreachable_pub)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A `redis-server` this test owns; killed when dropped, even on panic.
pub struct RedisServer {
    child: Child,
    port: u16,
    stopped: bool,
}

impl RedisServer {
    pub fn start(port: u16) -> Self {
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

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn signal(&mut self, signal: &str) {
        self.stopped = signal == "-STOP";
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} failed");
    }

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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
