//! Prints the load harness's summary from the loadgen JSON lines:
//! `bench-report RESULTS.jsonl`. Lines of one path and round that are
//! slices of it (they carry `"slice"`: `bench/run.sh` loads the facilitator
//! paths side by side in slices) are summed into one line first.

#![allow(clippy::print_stdout)]

use std::fmt::Write as _;

use serde_json::Value;

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// One line per path and round: the slices of one (lines with `"slice"`,
/// the same `label` and `round`) summed. Requests, statuses, errors, time
/// and server CPU add up, so that req/s and CPU per request are the
/// round's totals over its slices; latency percentiles are the slices'
/// request-weighted means (an approximation; `max_ms` is the maximum), and
/// peak RSS the largest the slices saw.
fn merge_slices(lines: Vec<Value>) -> Vec<Value> {
    let key = |v: &Value| {
        (
            v.get("label").and_then(Value::as_str).map(str::to_owned),
            v.get("round").and_then(Value::as_u64),
        )
    };
    let mut merged: Vec<Value> = Vec::new();
    let mut parts: Vec<Vec<Value>> = Vec::new();
    for line in lines {
        let sliced = line.get("slice").is_some();
        match merged
            .iter()
            .position(|m| sliced && m.get("slice").is_some() && key(m) == key(&line))
        {
            Some(i) => parts[i].push(line),
            None => {
                merged.push(line.clone());
                parts.push(vec![line]);
            }
        }
    }
    for (m, slices) in merged.iter_mut().zip(parts) {
        if slices.len() < 2 {
            continue;
        }
        let sum = |k: &str| {
            slices
                .iter()
                .map(|v| f(v, k))
                .filter(|x| x.is_finite())
                .sum::<f64>()
        };
        let requests = sum("requests");
        let elapsed = sum("elapsed_s");
        let weighted = |k: &str| {
            let (mut total, mut weight) = (0.0, 0.0);
            for v in &slices {
                let (x, n) = (f(v, k), f(v, "requests"));
                if x.is_finite() && n > 0.0 {
                    total += x * n;
                    weight += n;
                }
            }
            if weight > 0.0 {
                Value::from((total / weight * 1000.0).round() / 1000.0)
            } else {
                Value::Null
            }
        };
        let most = |k: &str| {
            slices
                .iter()
                .map(|v| f(v, k))
                .filter(|x| x.is_finite())
                .reduce(f64::max)
                .map_or(Value::Null, Value::from)
        };
        let mut statuses = serde_json::Map::new();
        for v in &slices {
            for (code, n) in v
                .get("statuses")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let before = statuses.get(code).and_then(Value::as_u64).unwrap_or(0);
                statuses.insert(code.clone(), Value::from(before + n.as_u64().unwrap_or(0)));
            }
        }
        let cpu = sum("server_cpu_s");
        let Some(line) = m.as_object_mut() else {
            continue;
        };
        line.insert("slices".into(), Value::from(slices.len()));
        line.insert("requests".into(), Value::from(requests));
        line.insert("ok".into(), Value::from(sum("ok")));
        line.insert("errors".into(), Value::from(sum("errors")));
        line.insert("statuses".into(), Value::Object(statuses));
        line.insert("elapsed_s".into(), Value::from(elapsed));
        line.insert(
            "rps".into(),
            Value::from(if elapsed > 0.0 {
                requests / elapsed
            } else {
                f64::NAN
            }),
        );
        line.insert(
            "server_cpu_us_per_req".into(),
            if requests > 0.0 && cpu > 0.0 {
                Value::from((cpu * 1e6 / requests).round())
            } else {
                Value::Null
            },
        );
        line.insert("server_cpu_s".into(), Value::from(cpu));
        for k in [
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "allocations_per_req",
            "allocated_bytes_per_req",
        ] {
            line.insert(k.into(), weighted(k));
        }
        line.insert("max_ms".into(), most("max_ms"));
        line.insert("server_hwm_kb".into(), most("server_hwm_kb"));
    }
    merged
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: bench-report RESULTS.jsonl")?;
    let lines: Vec<Value> = std::fs::read_to_string(&path)?
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let runs = merge_slices(lines);
    let label = |v: &Value| {
        v.get("label")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    let round = |v: &Value| v.get("round").and_then(Value::as_u64).unwrap_or(1);
    let rounds = runs.iter().map(round).max().unwrap_or(1);
    // Each run is compared with the baseline of its own round.
    let base_of = |v: &Value| {
        runs.iter()
            .find(|b| label(b) == "baseline" && round(b) == round(v))
    };
    let rps_ratio = |v: &Value| base_of(v).map_or(f64::NAN, |b| f(v, "rps") / f(b, "rps"));
    let cpu_ratio = |v: &Value| {
        base_of(v).map_or(f64::NAN, |b| {
            f(b, "server_cpu_us_per_req") / f(v, "server_cpu_us_per_req")
        })
    };

    let mut out = String::new();
    writeln!(
        out,
        "{:<18} {:>5} {:>8} {:>7} {:>9} {:>7} {:>8} {:>8} {:>9} {:>7} {:>9} {:>10}",
        "path",
        "round",
        "requests",
        "ok%",
        "req/s",
        "x base",
        "p50 ms",
        "p99 ms",
        "cpu us/rq",
        "cpu x",
        "peak RSS",
        "allocs/rq"
    )?;
    let mut ordered: Vec<&Value> = runs.iter().collect();
    // Path by path (in the order first run), round by round.
    let first_seen = |name: &str| runs.iter().position(|v| label(v) == name);
    ordered.sort_by_key(|v| (first_seen(&label(v)), round(v)));
    for v in ordered {
        let requests = f(v, "requests");
        let ok = f(v, "ok");
        writeln!(
            out,
            "{:<18} {:>5} {:>8} {:>6.1}% {:>9.0} {:>7.2} {:>8.2} {:>8.2} {:>9.0} {:>7.2} {:>6.1} MB {:>10.1}",
            label(v),
            round(v),
            requests,
            100.0 * ok / requests,
            f(v, "rps"),
            rps_ratio(v),
            f(v, "p50_ms"),
            f(v, "p99_ms"),
            f(v, "server_cpu_us_per_req"),
            cpu_ratio(v),
            f(v, "server_hwm_kb") / 1024.0,
            f(v, "allocations_per_req"),
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
        "\n(x base = req/s over the req/s of the same round's baseline; cpu x = that baseline's \
         server CPU per request over this path's: the share of a server core's capacity left, \
         independent of the load generator.)"
    )?;

    // The median over the rounds of a per-round figure of path `name`.
    let median_of = |name: &str, figure: &dyn Fn(&Value) -> f64| -> Option<(f64, Vec<f64>)> {
        let mut all: Vec<f64> = runs
            .iter()
            .filter(|v| label(v) == name)
            .map(figure)
            .filter(|x| x.is_finite())
            .collect();
        if all.is_empty() {
            return None;
        }
        let each = all.clone();
        all.sort_by(f64::total_cmp);
        let mid = all.len() / 2;
        let median = if all.len() % 2 == 1 {
            all[mid]
        } else {
            (all[mid - 1] + all[mid]) / 2.0
        };
        Some((median, each))
    };
    let list = |each: &[f64]| {
        each.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let by_round = |name: &str, r: u64| runs.iter().find(|v| label(v) == name && round(v) == r);

    writeln!(
        out,
        "\nTargets (ratios to the baseline of the same round; median over {rounds} round{}):",
        if rounds == 1 { "" } else { "s" }
    )?;
    let mut target = |name: &str, min: f64, what: &str| -> std::fmt::Result {
        match (median_of(name, &rps_ratio), median_of(name, &cpu_ratio)) {
            (Some((r, rs)), Some((c, cs))) => writeln!(
                out,
                "  {what:<34} >= {min:.2}: throughput ratio {r:.2} {} ({}); CPU-per-request ratio {c:.2} {} ({})",
                if r >= min { "MET" } else { "MISSED" },
                list(&rs),
                if c >= min { "MET" } else { "MISSED" },
                list(&cs),
            ),
            _ => writeln!(out, "  {what:<34} >= {min:.2}: not run"),
        }
    };
    target("challenge-402", 0.95, "402 challenge path")?;
    // Ratios of one path to another path of the same round.
    let mut versus = |path: &str, other: &str, min: f64, what: &str| -> std::fmt::Result {
        let ratio =
            |v: &Value| by_round(other, round(v)).map_or(f64::NAN, |o| f(v, "rps") / f(o, "rps"));
        let cpu = |v: &Value| {
            by_round(other, round(v)).map_or(f64::NAN, |o| {
                f(o, "server_cpu_us_per_req") / f(v, "server_cpu_us_per_req")
            })
        };
        match (median_of(path, &ratio), median_of(path, &cpu)) {
            (Some((r, rs)), Some((c, cs))) => writeln!(
                out,
                "  {what:<34} >= {min:.2}: throughput ratio {r:.2} {} ({}); CPU-per-request ratio {c:.2} ({})",
                if r >= min { "MET" } else { "MISSED" },
                list(&rs),
                list(&cs),
            ),
            _ => writeln!(out, "  {what:<34} >= {min:.2}: not run"),
        }
    };
    versus(
        "paid-http",
        "http-peer",
        1.3,
        "HTTP-facilitator paid path / x402-rs",
    )?;
    versus(
        "paid-http",
        "http-floor",
        0.9,
        "HTTP-facilitator paid path / floor",
    )?;
    // The same two with the engine's local pre-check off: what the engine
    // costs without the one signature recovery the pre-check adds.
    versus(
        "paid-http-noprecheck",
        "http-peer",
        1.3,
        "… pre-check off / x402-rs",
    )?;
    versus(
        "paid-http-noprecheck",
        "http-floor",
        0.9,
        "… pre-check off / floor",
    )?;
    // With every payment's signer recovered, as for a server whose every
    // payer is new.
    versus(
        "paid-http-newpayers",
        "http-peer",
        1.3,
        "… every payer new / x402-rs",
    )?;
    versus(
        "paid-http-newpayers",
        "http-floor",
        0.9,
        "… every payer new / floor",
    )?;
    versus(
        "paid-http-engine",
        "http-floor",
        0.9,
        "… the engine alone / floor",
    )?;
    versus(
        "batch-http",
        "paid-http",
        1.0,
        "batch voucher path / exact paid path",
    )?;
    versus(
        "session-redis",
        "session-floor",
        0.95,
        "session redemption / floor",
    )?;
    if let Some((rss, each)) = median_of("paid-http", &|v| f(v, "server_hwm_kb") / 1024.0) {
        writeln!(
            out,
            "  {:<34} <= 16 MB: {rss:.1} MB {} ({})",
            "peak RSS, HTTP-facilitator paid path",
            if rss <= 16.0 { "MET" } else { "MISSED" },
            list(&each),
        )?;
    }
    if let Some((rss, each)) =
        median_of("paid-http-noprecheck", &|v| f(v, "server_hwm_kb") / 1024.0)
    {
        writeln!(
            out,
            "  {:<34} <= 16 MB: {rss:.1} MB {} ({})",
            "… pre-check off",
            if rss <= 16.0 { "MET" } else { "MISSED" },
            list(&each),
        )?;
    }
    for path in [
        "paid-http",
        "paid-http-noprecheck",
        "paid-http-newpayers",
        "paid-http-engine",
        "http-floor",
        "paid-memory",
        "baseline",
        // The peer counts with the same allocator (bench/peer-x402rs).
        "http-peer",
    ] {
        if let Some((a, _)) = median_of(path, &|v| f(v, "allocations_per_req")) {
            writeln!(
                out,
                "  allocations per request, {path:<12}: {a:.1} (bytes {:.0})",
                median_of(path, &|v| f(v, "allocated_bytes_per_req")).map_or(f64::NAN, |b| b.0),
            )?;
        }
    }
    {
        let (path, floor, what) = (
            "challenge-402",
            "challenge-floor",
            "402 path against its floor (the same 402 bytes from a bare handler)",
        );
        let to_floor =
            |v: &Value| by_round(floor, round(v)).map_or(f64::NAN, |fl| f(v, "rps") / f(fl, "rps"));
        let cpu_to_floor = |v: &Value| {
            by_round(floor, round(v)).map_or(f64::NAN, |fl| {
                f(fl, "server_cpu_us_per_req") / f(v, "server_cpu_us_per_req")
            })
        };
        if let (Some((t, _)), Some((c, _)), Some((fl, fls))) = (
            median_of(path, &to_floor),
            median_of(path, &cpu_to_floor),
            median_of(floor, &rps_ratio),
        ) {
            writeln!(
                out,
                "  {what}: throughput {t:.2}, CPU per request {c:.2}; the floor itself: {fl:.2} of the baseline ({})",
                list(&fls),
            )?;
        }
    }
    if let (Some((r, _)), Some((cpu, _))) = (
        median_of("paid-memory", &rps_ratio),
        median_of("paid-memory", &|v| f(v, "server_cpu_us_per_req")),
    ) {
        writeln!(
            out,
            "  paid path (in-memory claims)       : ratio {r:.2}, {cpu:.0} us of server CPU per request \
             (see the profile for the share spent in secp256k1 recovery)",
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn slices_of_a_round_add_up_and_other_lines_stay_apart() {
        let lines = vec![
            json!({"label": "baseline", "round": 1, "requests": 900, "elapsed_s": 1.0, "rps": 900.0}),
            json!({"label": "paid-http", "round": 1, "slice": 1, "requests": 100, "ok": 100,
                   "statuses": {"200": 100}, "errors": 0, "elapsed_s": 1.0, "server_cpu_s": 0.005,
                   "p50_ms": 1.0, "max_ms": 3.0, "server_hwm_kb": 1000, "allocations_per_req": 10.0}),
            json!({"label": "paid-http", "round": 2, "slice": 1, "requests": 7, "elapsed_s": 1.0}),
            json!({"label": "paid-http", "round": 1, "slice": 2, "requests": 300, "ok": 299,
                   "statuses": {"200": 299, "402": 1}, "errors": 1, "elapsed_s": 1.0,
                   "server_cpu_s": 0.011, "p50_ms": 2.0, "max_ms": 9.0, "server_hwm_kb": 1200,
                   "allocations_per_req": 20.0}),
        ];
        let runs = merge_slices(lines);
        assert_eq!(runs.len(), 3, "{runs:#?}");
        let paid = &runs[1];
        assert_eq!(
            (paid["round"].as_u64(), paid["slices"].as_u64()),
            (Some(1), Some(2))
        );
        assert_eq!(f(paid, "requests"), 400.0);
        assert_eq!(f(paid, "ok"), 399.0);
        assert_eq!(f(paid, "errors"), 1.0);
        assert_eq!(paid["statuses"], json!({"200": 399, "402": 1}));
        // The round's throughput and CPU per request are totals over totals.
        assert_eq!(f(paid, "rps"), 200.0);
        assert_eq!(f(paid, "server_cpu_us_per_req"), 40.0);
        // Request-weighted means, and the largest of the peaks.
        assert_eq!(f(paid, "p50_ms"), 1.75);
        assert_eq!(f(paid, "allocations_per_req"), 17.5);
        assert_eq!(f(paid, "max_ms"), 9.0);
        assert_eq!(f(paid, "server_hwm_kb"), 1200.0);
        // A lone slice, and a line without slices, are left as they came.
        assert_eq!(f(&runs[2], "requests"), 7.0);
        assert_eq!(f(&runs[0], "rps"), 900.0);
    }
}
