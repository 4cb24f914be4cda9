//! `experiments flow-limit --quick` (loopback, no root needed): four flows of one session, rate
//! limits on three of them after 0.3 s. The limited flows never exceed their limit (by more
//! than 10 %), the ones limited below what they reached slow down to about it, the flow with a
//! limit above that is not held back, the unlimited one keeps going, and everything read was
//! the right bytes.
#![allow(clippy::unwrap_used)]

mod support;

#[test]
fn rate_limits_cap_three_flows_and_leave_the_fourth_alone() {
    let out = support::OutDir::new("flow-limit");
    let s = support::run_quick("flow-limit", &out.0);
    eprintln!("{s:#}");
    support::check_outputs(
        &out.0,
        "flow-limit",
        &s,
        &["flow 0 (limited)", "flow 1 (limited)", "flow 2 (limited)", "flow 3 (no limit)"],
    );
    assert_eq!(s["verified"], true, "every flow read the right bytes");
    let flows = s["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 4);
    let after = |i: usize| flows[i]["goodput_after_mb_s"].as_f64().unwrap();
    let limit = |i: usize| flows[i]["limit_mb_s"].as_f64().unwrap();
    for (i, flow) in flows.iter().enumerate().take(2) {
        let ratio = after(i) / limit(i);
        // The limit is met within 10% (what a user setting a rate limit expects). With a token bucket of 4 ms this was
        // 0.84-0.88 on a busy machine (a sender kept off the CPU longer forfeited its tokens);
        // with 20 ms it is 0.99-1.0.
        assert!((0.9..=1.1).contains(&ratio), "flow {i}: {} MB/s with a limit of {} MB/s", after(i), limit(i));
        // It really was limited: well below what it moved before.
        assert!(after(i) < 0.8 * flow["goodput_before_mb_s"].as_f64().unwrap(), "flow {i}: {flow}");
    }
    // Flow 2's limit is above what it reaches: it stays within it and is not held back to the
    // lower limits; the unlimited flow keeps going faster than the limited ones.
    assert!(after(2) <= 1.1 * limit(2), "flow 2: {}", flows[2]);
    assert!(after(2) > after(1) && after(3) > after(1), "flows 2 and 3 should outrun flow 1: {flows:?}");
    assert!(flows[3]["limit_mb_s"].is_null());
}
