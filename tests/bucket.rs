//! The shared token bucket: the semantics of DESIGN.md, proven under tokio's paused clock.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{aligned, assert_rate_bound, settle, CountPolls, Recorder};
use tokio::time::{advance, Instant};
use tower_throttle::{Bucket, Denied, Quota};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn burst_2_at_2_per_second_four_acquires_take_exactly_one_second() {
    let bucket = Bucket::new(Quota::per_second(2).burst(2));
    let start = Instant::now();
    for _ in 0..4 {
        bucket.acquire(1).await.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn semantic_1_rate_invariant_1000_tasks_through_clones() {
    let quota = Quota::per_second(100).burst(10);
    let bucket = Bucket::new(quota);
    let rec = Recorder::new();
    let mut tasks = Vec::new();
    for id in 0..1000 {
        let (b, rec) = (bucket.clone(), rec.clone());
        tasks.push(tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            rec.record(1, id);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let adm = rec.admissions();
    assert_eq!(adm.len(), 1000);
    assert_rate_bound(&adm, quota);
    // And no slower than the schedule: 10 at once, then one per 10 ms.
    let last = adm.iter().map(|a| a.0).max().unwrap();
    assert_eq!(last, Duration::from_millis(9_900));
}

#[tokio::test(start_paused = true)]
async fn semantic_2_shared_clones_draw_from_one_bucket() {
    let bucket = Bucket::new(Quota::per_second(5));
    let clones: Vec<Bucket> = (0..5).map(|_| bucket.clone()).collect();
    for c in &clones {
        c.try_acquire(1).unwrap();
        assert!(c.same_bucket(&bucket));
    }
    for c in &clones {
        assert!(c.try_acquire(1).is_err(), "a clone had its own tokens");
    }
    assert_eq!(bucket.snapshot().available, 0);
    assert!(!bucket.same_bucket(&Bucket::new(Quota::per_second(5))));
}

#[tokio::test(start_paused = true)]
async fn semantic_3_pause_holds_everyone_then_restarts_empty() {
    let bucket = Bucket::new(Quota::per_second(10).burst(5));
    let rec = Recorder::new();
    let mut tasks = Vec::new();
    for id in 0..3 {
        let (b, rec) = (bucket.clone(), rec.clone());
        tasks.push(tokio::spawn(async move {
            b.acquire(5).await.unwrap();
            rec.record(5, id);
        }));
    }
    settle().await; // first admitted from the full bucket, the others queued
    assert_eq!(rec.entries().len(), 1);
    bucket.pause(Duration::from_secs(30));
    let snap = bucket.snapshot();
    assert_eq!(snap.available, 0);
    assert_eq!(
        snap.paused_until,
        Some(Instant::now() + Duration::from_secs(30))
    );
    // Nothing, not even a fast-path try, during the cooldown.
    advance(Duration::from_secs(30) - MS).await;
    settle().await;
    assert!(bucket.try_acquire(1).is_err());
    assert_eq!(
        rec.entries().len(),
        1,
        "a waiter was admitted during the pause"
    );
    for t in tasks {
        t.await.unwrap();
    }
    let e = rec.entries();
    // The queued waiters of 5 tokens each: the first at 30 s + 4 intervals, the next 5 later:
    // from an empty bucket, with no burst at the end of the cooldown.
    assert_eq!(e[1].0, Duration::from_millis(30_400));
    assert_eq!(e[2].0, Duration::from_millis(30_900));
}

#[tokio::test(start_paused = true)]
async fn semantic_3_pause_first_token_due_when_cooldown_ends() {
    let bucket = Bucket::new(Quota::per_second(4).burst(4));
    bucket.pause(Duration::from_secs(2));
    advance(Duration::from_secs(2) - Duration::from_nanos(1)).await;
    let t = bucket.try_acquire(1).unwrap_err();
    assert_eq!(t.wait(), Some(Duration::from_nanos(1)));
    advance(Duration::from_nanos(1)).await;
    bucket.try_acquire(1).unwrap();
    assert!(
        bucket.try_acquire(1).is_err(),
        "burst at the end of a cooldown"
    );
    // A shorter pause does not shorten a longer one.
    bucket.pause(Duration::from_secs(10));
    bucket.pause(Duration::from_secs(1));
    advance(Duration::from_secs(5)).await;
    assert!(bucket.try_acquire(1).is_err());
}

#[tokio::test(start_paused = true)]
async fn semantic_5_fair_waiters_are_admitted_in_arrival_order() {
    let bucket = Bucket::new(Quota::per_second(10).burst(3));
    let rec = Recorder::new();
    let mut tasks = Vec::new();
    for id in 0..50 {
        let (b, rec) = (bucket.clone(), rec.clone());
        let cost = 1 + (id as u32 * 7) % 3;
        tasks.push(tokio::spawn(async move {
            b.acquire(cost).await.unwrap();
            rec.record(cost, id);
        }));
        // Arrivals in a known order.
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let e = rec.entries();
    let ids: Vec<usize> = e.iter().map(|x| x.2).collect();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
    // try_acquire cannot overtake queued waiters.
    let b2 = Bucket::new(Quota::per_second(10).burst(1));
    b2.try_acquire(1).unwrap();
    let waiter = tokio::spawn({
        let b = b2.clone();
        async move { b.acquire(1).await }
    });
    settle().await;
    advance(Duration::from_millis(100)).await;
    assert!(b2.try_acquire(1).is_err(), "try_acquire jumped the queue");
    waiter.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn semantic_5_quiet_each_waiter_is_woken_about_once() {
    let bucket = Bucket::new(Quota::per_second(1000).burst(10));
    let polls = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let b = bucket.clone();
        tasks.push(tokio::spawn(CountPolls::new(
            async move { b.acquire(1).await.unwrap() },
            polls.clone(),
        )));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // One poll to enqueue, one when the turn comes: no herd, no polling loop.
    let polls = polls.load(Ordering::Relaxed);
    assert!(polls <= 2 * 200, "{polls} polls for 200 admissions");
}

#[tokio::test(start_paused = true)]
async fn semantic_5_no_drift_schedule_not_timer() {
    // 3 per second: the intervals (333,333,334 ns) never land on tokio's 1 ms ticks, so every
    // wake-up is late; the schedule must not restart from the wake-up.
    let bucket = Bucket::new(Quota::per_second(3).burst(1));
    let start = Instant::now();
    for _ in 0..301 {
        bucket.acquire(1).await.unwrap();
    }
    let elapsed = start.elapsed();
    let ideal = Quota::per_second(3).interval() * 300;
    assert!(elapsed >= ideal, "{elapsed:?} < {ideal:?}");
    assert!(elapsed < ideal + MS, "drifted: {elapsed:?} for {ideal:?}");
}

#[tokio::test(start_paused = true)]
async fn semantic_6_cancel_safe_100_waiters_50_dropped() {
    let quota = Quota::per_second(100).burst(1);
    let bucket = Bucket::new(quota);
    bucket.try_acquire(1).unwrap();
    let rec = Recorder::new();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for id in 0..100 {
        let (b, rec) = (bucket.clone(), rec.clone());
        let task = tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            rec.record(1, id);
        });
        if id % 2 == 1 {
            dropped.push(task);
        } else {
            kept.push(task);
        }
    }
    settle().await;
    assert_eq!(bucket.snapshot().waiting, 100);
    advance(Duration::from_millis(5)).await; // mid-wait, before anyone's turn
    for t in &dropped {
        t.abort();
    }
    for t in dropped {
        assert!(t.await.unwrap_err().is_cancelled());
    }
    assert_eq!(bucket.snapshot().waiting, 50);
    for t in kept {
        t.await.unwrap();
    }
    let e = rec.entries();
    assert_eq!(e.len(), 50);
    // The 50 kept ones went at the full rate: one per 10 ms from the first slot.
    let times: Vec<Duration> = e.iter().map(|x| x.0).collect();
    let expected: Vec<Duration> = (1..=50).map(|i| Duration::from_millis(10 * i)).collect();
    assert_eq!(times, expected);
    assert_rate_bound(&rec.admissions(), quota);
}

#[tokio::test(start_paused = true)]
async fn semantic_6_cancel_of_last_waiter_returns_its_slot() {
    let bucket = Bucket::new(Quota::per_second(10).burst(1));
    bucket.try_acquire(1).unwrap();
    let fut = bucket.acquire(1);
    let mut fut = Box::pin(fut);
    assert!(futures::poll!(fut.as_mut()).is_pending());
    drop(fut);
    advance(Duration::from_millis(100)).await;
    bucket.try_acquire(1).unwrap();
}

#[tokio::test(start_paused = true)]
async fn semantic_8_acquire_more_than_burst_fails_at_once() {
    let bucket = Bucket::new(Quota::per_second(10).burst(5));
    let Denied::ExceedsBurst(err) = bucket.acquire(6).await.unwrap_err() else {
        panic!("expected ExceedsBurst");
    };
    assert_eq!((err.requested(), err.burst()), (6, 5));
    // "Never" is its own answer, with no wait (no sentinel duration).
    let never = bucket.try_acquire(6).unwrap_err();
    assert_eq!(never, Denied::ExceedsBurst(err));
    assert_eq!(never.wait(), None);
    assert_eq!(never.retry_after_secs(), None);
    // Zero tokens: always fine, takes nothing.
    bucket.try_acquire(0).unwrap();
    bucket.acquire(0).await.unwrap();
    assert_eq!(bucket.snapshot().available, 5);
}

#[tokio::test(start_paused = true)]
async fn throttled_says_exactly_how_long() {
    let bucket = Bucket::new(Quota::per_second(4).burst(2));
    bucket.try_acquire(2).unwrap();
    let Denied::Throttled(t) = bucket.try_acquire(1).unwrap_err() else {
        panic!("expected Throttled");
    };
    assert_eq!(t.wait(), Duration::from_millis(250));
    assert_eq!(t.retry_after_secs(), 1);
    let t = bucket.try_acquire(2).unwrap_err();
    assert_eq!(t.wait(), Some(Duration::from_millis(500)));
    advance(Duration::from_millis(250) - Duration::from_nanos(1)).await;
    assert!(bucket.try_acquire(1).is_err());
    advance(Duration::from_nanos(1)).await;
    bucket.try_acquire(1).unwrap();
}

#[tokio::test(start_paused = true)]
async fn snapshot_reports_tokens_and_refill() {
    let bucket = Bucket::new(Quota::per_second(10).burst(4));
    let s = bucket.snapshot();
    assert_eq!(
        (s.available, s.next_token_in, s.full_in, s.paused_until),
        (4, Duration::ZERO, Duration::ZERO, None)
    );
    bucket.try_acquire(4).unwrap();
    let s = bucket.snapshot();
    assert_eq!(s.available, 0);
    assert_eq!(s.next_token_in, Duration::from_millis(100));
    assert_eq!(s.full_in, Duration::from_millis(400));
    advance(Duration::from_millis(150)).await;
    assert_eq!(bucket.snapshot().available, 1);
}

#[test]
fn bucket_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Bucket>();
    fn assert_send<T: Send>(_: &T) {}
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = Bucket::new(Quota::per_second(1));
        assert_send(&b.acquire(1));
    });
}

#[cfg(feature = "quanta")]
#[tokio::test]
async fn tsc_clock_decides_and_waits_like_the_tokio_clock() {
    // Real time: the TSC does not follow tokio's paused clock.
    let bucket = Bucket::builder(Quota::per_second(20).burst(1))
        .tsc_clock()
        .build();
    bucket.try_acquire(1).unwrap();
    let wait = bucket.try_acquire(1).unwrap_err().wait().unwrap();
    assert!(
        wait <= Duration::from_millis(50) && wait > Duration::from_millis(40),
        "{wait:?}"
    );
    let start = std::time::Instant::now();
    bucket.acquire(1).await.unwrap();
    bucket.acquire(1).await.unwrap();
    let took = start.elapsed();
    // Two more tokens at 20/s: 50 ms each, never early.
    assert!(took >= Duration::from_millis(90), "{took:?}");
}

/// A pause the instant a bucket is made (the clock's origin) empties it like any other:
/// only the first token, due when the pause ends.
#[tokio::test(start_paused = true)]
async fn a_pause_at_the_instant_a_bucket_is_made_empties_it() {
    for algorithm in [
        tower_throttle::Algorithm::TokenBucket,
        tower_throttle::Algorithm::FixedWindow,
        tower_throttle::Algorithm::SlidingWindow,
        tower_throttle::Algorithm::SlidingLog,
    ] {
        let bucket = aligned(Quota::per_second(10).burst(5), algorithm);
        bucket.pause(Duration::ZERO);
        bucket.try_acquire(1).unwrap();
        assert!(
            bucket.try_acquire(1).is_err(),
            "{algorithm:?}: a second token right after the pause"
        );
    }
}
