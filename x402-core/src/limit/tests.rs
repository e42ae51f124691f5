use super::*;

const SEC: u64 = 1_000_000_000;

fn limiter(count: u32, period_secs: u64) -> Limiter {
    Limiter::new(
        Quota {
            count,
            period: Duration::from_secs(period_secs),
        },
        DEFAULT_MAX_CLIENTS,
    )
    .unwrap()
}

#[test]
fn a_burst_then_refusal() {
    let limiter = limiter(3, 60);
    for _ in 0..3 {
        assert_eq!(limiter.take(7, 0), Ok(Slot::Client(7)));
    }
    // One unit every 20 s.
    assert_eq!(limiter.take(7, 0), Err(Duration::from_secs(20)));
    assert_eq!(limiter.take(7, 5 * SEC), Err(Duration::from_secs(15)));
    // Another client has its own bucket.
    assert_eq!(limiter.take(8, 5 * SEC), Ok(Slot::Client(8)));
}

#[test]
fn the_bucket_refills_over_the_period() {
    let limiter = limiter(3, 60);
    for _ in 0..3 {
        limiter.take(7, 0).unwrap();
    }
    // One unit back after 20 s, not two.
    assert!(limiter.take(7, 20 * SEC).is_ok());
    assert!(limiter.take(7, 20 * SEC).is_err());
    // After a whole period (counted from the last unit taken), all three.
    let later = 80 * SEC;
    for _ in 0..3 {
        assert!(limiter.take(7, later).is_ok());
    }
    assert!(limiter.take(7, later).is_err());
    // Idle time does not bank more than the burst.
    let much_later = 10_000 * SEC;
    for _ in 0..3 {
        assert!(limiter.take(7, much_later).is_ok());
    }
    assert!(limiter.take(7, much_later).is_err());
}

#[test]
fn a_unit_given_back_can_be_taken_again() {
    let limiter = limiter(2, 60);
    let a = limiter.take(7, 0).unwrap();
    let b = limiter.take(7, 0).unwrap();
    assert!(limiter.take(7, 0).is_err());
    limiter.give_back(a, SEC);
    assert!(limiter.take(7, SEC).is_ok());
    assert!(limiter.take(7, SEC).is_err());
    // Giving back never fills the bucket beyond full.
    limiter.give_back(b, 1_000 * SEC);
    limiter.give_back(b, 1_000 * SEC);
    limiter.give_back(b, 1_000 * SEC);
    assert!(limiter.take(7, 1_000 * SEC).is_ok());
    assert!(limiter.take(7, 1_000 * SEC).is_ok());
    assert!(limiter.take(7, 1_000 * SEC).is_err());
}

#[test]
fn retry_after_is_rounded_up_to_whole_seconds() {
    let limiter = limiter(3, 10);
    for _ in 0..3 {
        limiter.take(7, 0).unwrap();
    }
    // 10 s / 3: a unit every 3.333 s.
    let wait = limiter.take(7, SEC / 2).unwrap_err();
    assert!(wait > Duration::from_millis(2_800) && wait < Duration::from_secs(3));
    assert_eq!(retry_after_secs(wait), 3);
    assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_secs(20)), 20);
    assert_eq!(retry_after_secs(Duration::from_millis(20_001)), 21);
    assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
}

#[test]
fn idle_clients_are_swept() {
    let limiter = limiter(1, 1);
    for key in 0..10_000 {
        limiter.take(key, key * 1_000).unwrap();
    }
    assert_eq!(limiter.lock().clients.len(), 10_000);
    // A minute on, every bucket is full again: the next new client's
    // insert sweeps them all.
    limiter.take(u64::MAX, 120 * SEC).unwrap();
    assert_eq!(limiter.lock().clients.len(), 1);
}

#[test]
fn clients_beyond_the_bound_share_one_bucket() {
    let limiter = Limiter::new(
        Quota {
            count: 2,
            period: Duration::from_secs(60),
        },
        100,
    )
    .unwrap();
    for key in 0..100 {
        assert_eq!(limiter.take(key, 0), Ok(Slot::Client(key)));
    }
    // Full of live entries: newcomers share the overflow bucket, and
    // the map does not grow.
    assert_eq!(limiter.take(1_000, SEC), Ok(Slot::Overflow));
    assert_eq!(limiter.take(1_001, SEC), Ok(Slot::Overflow));
    assert!(limiter.take(1_002, SEC).is_err());
    assert_eq!(limiter.lock().clients.len(), 100);
    // Tracked clients keep their own buckets.
    assert_eq!(limiter.take(5, SEC), Ok(Slot::Client(5)));
    // Once their buckets are full again, the entries go and newcomers
    // get buckets of their own.
    assert_eq!(limiter.take(1_003, 120 * SEC), Ok(Slot::Client(1_003)));
    assert_eq!(limiter.lock().clients.len(), 1);
}

#[test]
fn addresses_group_as_documented() {
    let v4: IpAddr = "192.0.2.1".parse().unwrap();
    let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
    assert_eq!(client_address(mapped), v4);
    let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(client_address(a), client_address(b));
    assert_ne!(client_address(a), client_address(c));
}

fn headers(name: &str, lines: &[&str]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in lines {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            line.parse().unwrap(),
        );
    }
    headers
}

#[test]
fn x_forwarded_for_is_read_from_the_right() {
    let xff = ProxyHeader::XForwardedFor;
    let h = headers(
        "x-forwarded-for",
        &["6.6.6.6, 203.0.113.7", "10.0.0.1:443 ,, "],
    );
    let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
    assert_eq!(forwarded_client(&h, 1, xff), ip("10.0.0.1"));
    assert_eq!(forwarded_client(&h, 2, xff), ip("203.0.113.7"));
    assert_eq!(forwarded_client(&h, 3, xff), ip("6.6.6.6"));
    assert_eq!(forwarded_client(&h, 4, xff), None);
    let h = headers(
        "x-forwarded-for",
        &["[2001:db8::1]:80, 2001:db8::2, unknown"],
    );
    assert_eq!(forwarded_client(&h, 1, xff), None);
    assert_eq!(forwarded_client(&h, 2, xff), ip("2001:db8::2"));
    assert_eq!(forwarded_client(&h, 3, xff), ip("2001:db8::1"));
    assert_eq!(
        forwarded_client(&HeaderMap::new(), 1, xff),
        None,
        "no header"
    );
}

#[test]
fn forwarded_is_read_from_the_right() {
    let fwd = ProxyHeader::Forwarded;
    let h = headers(
        "forwarded",
        &[
            "for=\"6.6.6.6, for=1.1.1.1\"",
            "for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\"",
            "proto=https;for=198.51.100.9:8080",
        ],
    );
    let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
    assert_eq!(forwarded_client(&h, 1, fwd), ip("198.51.100.9"));
    assert_eq!(forwarded_client(&h, 2, fwd), ip("2001:db8:cafe::17"));
    assert_eq!(forwarded_client(&h, 3, fwd), ip("192.0.2.60"));
    // The client's own quotes do not hide the elements proxies added.
    assert_eq!(forwarded_client(&h, 4, fwd), ip("1.1.1.1"));
    let h = headers("forwarded", &["for=_hidden, for=unknown"]);
    assert_eq!(forwarded_client(&h, 1, fwd), None);
}
