//! What some tests need from outside the workspace, checked in one place:
//! the Node tooling of `tests/js` (`npm ci` there: anvil, the official x402
//! clients, the validators), a Redis server, the `redis-server` binary.
//!
//! Each check fails the test (never skips it) with one line that names what
//! is missing and the command that provides it, `bash scripts/test-all.sh`.
//!
//! `X402_JS_DIR` points the Node checks at another directory than
//! `tests/js` (to see the message, set it to one without `node_modules`).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The command that installs and starts everything these checks look for.
pub const SETUP: &str = "bash scripts/test-all.sh";

/// Where Redis is looked for when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf()
}

/// `tests/js`, or `X402_JS_DIR` when set.
pub fn js_dir() -> PathBuf {
    match std::env::var_os("X402_JS_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join("tests/js"),
    }
}

/// `path` relative to the workspace root when it is inside it.
fn shown(path: &Path) -> String {
    let root = workspace_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Fails the test with one line.
#[track_caller]
fn missing(what: &str) -> ! {
    panic!("{what}");
}

/// Checks that Node.js runs and that every package `tests/js/package.json`
/// names is installed in `tests/js/node_modules`; returns `tests/js`.
///
/// # Panics
///
/// With one line naming the fix when either is missing.
#[track_caller]
pub fn node_tooling() -> PathBuf {
    static NODE: OnceLock<bool> = OnceLock::new();
    let js = js_dir();
    let modules = js.join("node_modules");
    let manifest: Option<Value> = std::fs::read(js.join("package.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let installed = manifest.is_some_and(|manifest| {
        ["dependencies", "devDependencies"]
            .iter()
            .filter_map(|section| manifest[section].as_object())
            .flat_map(|packages| packages.keys())
            .all(|name| modules.join(name).join("package.json").is_file())
    });
    if !installed {
        missing(&format!(
            "Node tooling not installed ({}): run `{SETUP}`",
            shown(&modules)
        ));
    }
    let runs = *NODE.get_or_init(|| {
        Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    if !runs {
        missing(&format!(
            "Node.js (node) not found on the PATH: run `{SETUP}` (it installs Node.js and tests/js/node_modules)"
        ));
    }
    js
}

/// `node <tests/js/script>` run in `tests/js`, after [`node_tooling`].
#[track_caller]
pub fn node(script: &str) -> Command {
    let js = node_tooling();
    let mut command = Command::new("node");
    command.arg(js.join(script)).current_dir(&js);
    command
}

/// [`node`] for tokio (killed when dropped).
#[track_caller]
pub fn node_async(script: &str) -> tokio::process::Command {
    let js = node_tooling();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(js.join(script))
        .current_dir(&js)
        .kill_on_drop(true);
    command
}

/// Runs `command` (from [`node_async`], running `script`) to its end, killed
/// if it outlives `limit`: its exit code, the last JSON line of its stdout
/// (`Value::Null` when there is none), and its stderr.
///
/// # Panics
///
/// When node cannot be started, or `limit` passes.
pub async fn node_json(
    mut command: tokio::process::Command,
    script: &str,
    limit: std::time::Duration,
) -> (Option<i32>, serde_json::Value, String) {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node {script} (node >= 20 is needed): {e}"));
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish within {limit:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), json, stderr)
}

/// The pinned anvil binary of `tests/js/node_modules`, after
/// [`node_tooling`].
///
/// # Panics
///
/// With one line naming the fix when it is missing.
#[track_caller]
pub fn anvil() -> PathBuf {
    let js = node_tooling();
    let (os, arch) = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => ("linux", "amd64"),
        ("linux", "aarch64") => ("linux", "arm64"),
        ("macos", "aarch64") => ("darwin", "arm64"),
        ("macos", "x86_64") => ("darwin", "amd64"),
        (os, arch) => missing(&format!("no pinned anvil binary for {os}/{arch}")),
    };
    let binary = js.join(format!(
        "node_modules/@foundry-rs/anvil-{os}-{arch}/bin/anvil"
    ));
    if !binary.is_file() {
        missing(&format!(
            "anvil not installed ({}): run `{SETUP}`",
            shown(&binary)
        ));
    }
    binary
}

/// `REDIS_URL` (default [`DEFAULT_REDIS_URL`]) once a Redis answers `PING`
/// there.
///
/// # Panics
///
/// With one line naming the fix when nothing answers within 2 s.
pub async fn redis_url() -> String {
    let url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
    if let Err(why) = ping(&url).await {
        missing(&format!(
            "no Redis at {} ({why}): run `{SETUP}` (it starts one)",
            redacted(&url)
        ));
    }
    url
}

/// Sends `PING` to the Redis at `url` and waits for any reply (`-NOAUTH`
/// counts: something that speaks Redis answers).
async fn ping(url: &str) -> Result<(), String> {
    // Other schemes (TLS, unix sockets) are left to the client to check.
    let Some(rest) = url.strip_prefix("redis://") else {
        return Ok(());
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let address = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:6379")
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&address).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 1];
        stream.read_exact(&mut reply).await?;
        Ok::<_, std::io::Error>(reply[0])
    };
    match tokio::time::timeout(Duration::from_secs(2), exchange).await {
        Ok(Ok(b'+' | b'-')) => Ok(()),
        Ok(Ok(_)) => Err("not a Redis reply".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2 s".into()),
    }
}

/// `url` without its password.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Checks that `redis-server` is on the `PATH`, for tests that run a Redis
/// of their own (to stop, pause or restart it).
///
/// # Panics
///
/// With one line naming the fix when it is not.
#[track_caller]
pub fn redis_server() {
    static FOUND: OnceLock<bool> = OnceLock::new();
    let found = *FOUND.get_or_init(|| {
        Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    if !found {
        missing(&format!(
            "redis-server not found on the PATH: run `{SETUP}` (it installs one)"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redacted("redis://user:hunter2@127.0.0.1:6379/0"),
            "redis://***@127.0.0.1:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
