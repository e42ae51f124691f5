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
    /// Starts `redis-server` on a free port and waits until it answers
    /// `PING`. A port found free can be taken by another test before the
    /// server binds it; the server then exits, and this tries a fresh port
    /// (up to five). Fails (panics, in one line) when `redis-server` is not
    /// on the `PATH`: [`require::redis_server`].
    #[track_caller]
    pub fn start_free() -> Self {
        for _ in 0..5 {
            if let Some(server) = Self::try_start(free_port()) {
                return server;
            }
        }
        panic!("redis-server exited on five free ports in a row");
    }

    /// Starts `redis-server` on `port` (a port the test already had, to
    /// restart on it) and waits until it answers `PING`. Fails (panics, in
    /// one line) when `redis-server` is not on the `PATH`
    /// ([`require::redis_server`]) or when it cannot take the port.
    #[track_caller]
    pub fn start(port: u16) -> Self {
        Self::try_start(port)
            .unwrap_or_else(|| panic!("redis-server could not listen on port {port}"))
    }

    /// `None` when the server exited before answering: the port was taken.
    #[track_caller]
    fn try_start(port: u16) -> Option<Self> {
        require::redis_server();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("these tests need redis-server on the PATH: {e}"));
        let mut server = Self {
            child,
            port,
            stopped: false,
        };
        server.wait_ready().then_some(server)
    }

    /// Waits until this server answers `PING` on its port; `false` if it
    /// exited first. A `PONG` from another test's server on the same port
    /// does not count: the answer must come from this child's process.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            if ping(self.port)
                && info_field(self.port, "server", "process_id") == self.child.id().to_string()
            {
                return true;
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
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// How many script calls (`EVALSHA`) the server on `port` has run since it
/// started, from its `INFO commandstats` (read over a connection of its own).
pub fn script_calls(port: u16) -> u64 {
    let calls = info_field(port, "commandstats", "cmdstat_evalsha");
    calls
        .strip_prefix("calls=")
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Whether the server on `port` answers `PING` with `PONG`.
fn ping(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let mut reply = [0u8; 7];
    conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    conn.write_all(b"PING\r\n").is_ok()
        && conn.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// The value of `field` in the server's `INFO section` (empty when the
/// section has no such line), read over a connection of its own.
fn info_field(port: u16, section: &str, field: &str) -> String {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(format!("INFO {section}\r\n").as_bytes())
        .unwrap();
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
    let prefix = format!("{field}:");
    String::from_utf8(text)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix).map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port another test's server holds is not taken for this one's: the
    /// new server exits, and its `PONG`-answering neighbour is not mistaken
    /// for it.
    #[test]
    fn a_port_taken_by_another_server_is_not_mistaken_for_ours() {
        let neighbour = RedisServer::start_free();
        let started = Instant::now();
        assert!(RedisServer::try_start(neighbour.port()).is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(ping(neighbour.port()), "the neighbour still answers");

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(RedisServer::try_start(port).is_none());
    }
}
