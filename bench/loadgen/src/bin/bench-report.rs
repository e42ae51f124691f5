//! Prints the load harness's summary from the loadgen JSON lines:
//! `bench-report RESULTS.jsonl`.

#![allow(clippy::print_stdout)]

use std::fmt::Write as _;

use serde_json::Value;

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: bench-report RESULTS.jsonl")?;
    let runs: Vec<Value> = std::fs::read_to_string(&path)?
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let label = |v: &Value| {
        v.get("label")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    let base = runs.iter().find(|v| label(v) == "baseline");
    let base_rps = base.map_or(f64::NAN, |b| f(b, "rps"));
    let base_cpu = base.map_or(f64::NAN, |b| f(b, "server_cpu_us_per_req"));

    let mut out = String::new();
    writeln!(
        out,
        "{:<18} {:>8} {:>7} {:>9} {:>7} {:>8} {:>8} {:>9} {:>7} {:>9}",
        "path",
        "requests",
        "ok%",
        "req/s",
        "x base",
        "p50 ms",
        "p99 ms",
        "cpu us/rq",
        "cpu x",
        "peak RSS"
    )?;
    for v in &runs {
        let requests = f(v, "requests");
        let ok = f(v, "ok");
        let cpu = f(v, "server_cpu_us_per_req");
        writeln!(
            out,
            "{:<18} {:>8} {:>6.1}% {:>9.0} {:>7.2} {:>8.2} {:>8.2} {:>9.0} {:>7.2} {:>6.1} MB",
            label(v),
            requests,
            100.0 * ok / requests,
            f(v, "rps"),
            f(v, "rps") / base_rps,
            f(v, "p50_ms"),
            f(v, "p99_ms"),
            cpu,
            base_cpu / cpu,
            f(v, "server_hwm_kb") / 1024.0,
        )?;
        if ok < requests {
            writeln!(
                out,
                "  !! {}: statuses {} errors {}",
                label(v),
                v.get("statuses").cloned().unwrap_or_default(),
                v.get("errors").cloned().unwrap_or_default()
            )?;
        }
    }
    writeln!(
        out,
        "\n(x base = req/s over the baseline's req/s in this run; cpu x = the baseline's server \
         CPU per request over this path's: the share of a server core's capacity left, \
         independent of the load generator.)"
    )?;

    writeln!(out, "\nTargets (ratios to the baseline, this run):")?;
    let by = |name: &str| runs.iter().find(|v| label(v) == name);
    let mut target = |name: &str, min: f64, what: &str| -> std::fmt::Result {
        match by(name) {
            Some(v) => {
                let r = f(v, "rps") / base_rps;
                let c = base_cpu / f(v, "server_cpu_us_per_req");
                writeln!(
                    out,
                    "  {what:<34} >= {min:.2}: throughput ratio {r:.2} {}; CPU-per-request ratio {c:.2} {}",
                    if r >= min { "MET" } else { "MISSED" },
                    if c >= min { "MET" } else { "MISSED" },
                )
            }
            None => writeln!(out, "  {what:<34} >= {min:.2}: not run"),
        }
    };
    target("challenge-402", 0.85, "402 challenge path")?;
    target("session-redis", 0.5, "session redemption on Redis")?;
    for (path, floor, what) in [
        (
            "challenge-402",
            "challenge-floor",
            "402 path against its floor (the same 402 bytes from a bare handler)",
        ),
        (
            "session-redis",
            "session-floor",
            "session path against its floor (one Redis redemption from a bare handler)",
        ),
    ] {
        if let (Some(c), Some(fl)) = (by(path), by(floor)) {
            writeln!(
                out,
                "  {what}: throughput {:.2}, CPU per request {:.2}; the floor itself: {:.2} of the baseline",
                f(c, "rps") / f(fl, "rps"),
                f(fl, "server_cpu_us_per_req") / f(c, "server_cpu_us_per_req"),
                f(fl, "rps") / base_rps,
            )?;
        }
    }
    if let Some(v) = by("paid-memory") {
        writeln!(
            out,
            "  paid path (in-memory claims)       : ratio {:.2}, {:.0} us of server CPU per request \
             (see the profile for the share spent in secp256k1 recovery)",
            f(v, "rps") / base_rps,
            f(v, "server_cpu_us_per_req")
        )?;
    }

    for v in runs.iter().filter(|v| label(v).starts_with("memory")) {
        let samples: Vec<(f64, f64)> = v
            .get("rss_samples_kb")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        writeln!(
            out,
            "\nMemory ({}: {} requests at {} req/s target, {:.0} s): server RSS samples (s: MB)",
            label(v),
            f(v, "requests"),
            f(v, "rate"),
            f(v, "elapsed_s")
        )?;
        let line: Vec<String> = samples
            .iter()
            .map(|(t, kb)| format!("{t:.0}: {:.1}", kb / 1024.0))
            .collect();
        writeln!(out, "  {}", line.join("  "))?;
        let rate = f(v, "requests") / f(v, "elapsed_s").max(1.0);
        let growth = |from: &(f64, f64), to: &(f64, f64)| {
            let kb = to.1 - from.1;
            let served = rate * (to.0 - from.0);
            (kb / 1024.0, kb * 1024.0 / served.max(1.0))
        };
        if let (Some(first), Some(last)) = (samples.get(1).or(samples.first()), samples.last()) {
            let (mb, per_req) = growth(first, last);
            writeln!(
                out,
                "  from {:.0} s to the end: {mb:+.1} MB ({per_req:.0} bytes per request served); peak {:.1} MB",
                first.0,
                f(v, "server_hwm_kb") / 1024.0
            )?;
        }
        // Claims are kept 900 s and swept within a minute after: from then
        // on, each request's state replaces an expired one's.
        const STEADY_FROM_S: f64 = 900.0 + 60.0 + 40.0;
        match (
            samples.iter().find(|(t, _)| *t >= STEADY_FROM_S),
            samples.last(),
        ) {
            (Some(first), Some(last)) if last.0 - first.0 >= 120.0 => {
                let (mb, per_req) = growth(first, last);
                writeln!(
                    out,
                    "  once claims expire (from {:.0} s, {:.0} s of samples): {mb:+.1} MB ({per_req:.1} bytes \
                     per request): {}",
                    first.0,
                    last.0 - first.0,
                    if per_req.abs() < 16.0 { "FLAT" } else { "GROWING" }
                )?;
            }
            _ => writeln!(
                out,
                "  claims are kept at least 900 s, so none expired in this run: the growth is \
                 the live claims'. Run MEM_DURATION=1500 (or more) to see memory once they expire."
            )?,
        }
    }
    print!("{out}");
    Ok(())
}
