//! What a request costs a [`RejectLayer`](super::RejectLayer): one token, or the weight a
//! function gives it.

use crate::rate_limit::UnitCost;

/// The tokens a request takes. Implemented for [`UnitCost`] (one) and for every
/// `Fn(&Request<B>) -> u32`.
pub trait Cost<Req> {
    /// The tokens `req` takes.
    fn cost(&self, req: &Req) -> u32;
}

impl<Req> Cost<Req> for UnitCost {
    #[inline]
    fn cost(&self, _: &Req) -> u32 {
        1
    }
}

impl<Req, F: Fn(&Req) -> u32> Cost<Req> for F {
    #[inline]
    fn cost(&self, req: &Req) -> u32 {
        self(req)
    }
}
