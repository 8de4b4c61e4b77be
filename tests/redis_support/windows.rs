//! Counting what a window of one second admits in Redis, on the Redis clock. (A test file
//! includes it beside `redis_support`: `#[path = "redis_support/windows.rs"] mod windows;`.)

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tower_throttle::Denied;

use crate::redis_support::redis_now_us;

/// The width of the windows these helpers count in, µs.
pub(crate) const WIDTH_US: u64 = 1_000_000;

/// Sleep until the Redis clock is 10 ms into a window of index `≥ after`; its index.
pub(crate) async fn window_start(conn: &mut MultiplexedConnection, after: u64) -> u64 {
    loop {
        let now = redis_now_us(conn).await;
        let index = now / WIDTH_US;
        let into = now % WIDTH_US;
        if index >= after && (10_000..200_000).contains(&into) {
            return index;
        }
        let next = if index < after {
            after
        } else if into < 10_000 {
            index
        } else {
            index + 1
        };
        let target = next * WIDTH_US + 10_000;
        tokio::time::sleep(Duration::from_micros(target.saturating_sub(now))).await;
    }
}

/// How many single tokens `try_one` gets admitted in one window of the Redis clock that
/// starts quiet (nothing admitted in the window before it, which a sliding window would
/// carry): tries until the first refusal (or `most + 1` admissions), then twice more (both
/// must be refused too). `after`: the first window index that may be used; moved past the
/// one used.
pub(crate) async fn admitted_in_one_window<F, Fut>(
    mut try_one: F,
    conn: &mut MultiplexedConnection,
    after: &mut u64,
    most: u32,
) -> u32
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Denied>>,
{
    for _ in 0..5 {
        let index = window_start(conn, *after).await;
        let mut admitted = 0;
        while admitted <= most {
            match try_one().await {
                Ok(()) => admitted += 1,
                Err(Denied::Throttled(_)) => break,
                Err(e) => panic!("a decision failed: {e}"),
            }
        }
        let later = [try_one().await, try_one().await];
        let end = redis_now_us(conn).await / WIDTH_US;
        *after = end + 2;
        if end == index {
            assert!(
                later.iter().all(|r| matches!(r, Err(Denied::Throttled(_)))),
                "after {admitted} admitted: {later:?}"
            );
            return admitted;
        }
        // The window ended before the count was done (a slow machine): count again.
    }
    panic!("no window was long enough to count its admissions");
}
