//! Honour a server's push-back: `429`/`503` and `Retry-After`.

mod parse;

pub use self::parse::*;
