//! `tracing` events, compiled away without the `tracing` feature.

/// `trace_event!(level, fields…, "message")`: a `tracing` event when the feature is on.
macro_rules! trace_event {
    ($level:ident, $($arg:tt)+) => {
        #[cfg(feature = "tracing")]
        {
            tracing::$level!(target: "tower_throttle", $($arg)+);
        }
    };
}
