//! What a request costs a [`RejectLayer`](super::RejectLayer): one request, the weight a
//! function gives it, or an amount per resource.

use crate::rate_limit::UnitCost;
use crate::Cost;

/// What a request costs. Implemented for [`UnitCost`] (one request), for every
/// `Fn(&Request<B>) -> u32` (that many requests) and for [`PerResource`].
pub trait Weigh<Req> {
    /// What `req` costs.
    fn weigh(&self, req: &Req) -> Cost;
}

/// A function that prices a request per [`Resource`](crate::Resource) (see
/// [`RejectLayer::cost_per_resource`](super::RejectLayer::cost_per_resource)).
#[derive(Debug, Clone, Copy)]
pub struct PerResource<F>(pub(super) F);

impl<Req> Weigh<Req> for UnitCost {
    #[inline]
    fn weigh(&self, _: &Req) -> Cost {
        Cost::from(1)
    }
}

impl<Req, F: Fn(&Req) -> u32> Weigh<Req> for F {
    #[inline]
    fn weigh(&self, req: &Req) -> Cost {
        Cost::from(self(req))
    }
}

impl<Req, F: Fn(&Req) -> Cost> Weigh<Req> for PerResource<F> {
    #[inline]
    fn weigh(&self, req: &Req) -> Cost {
        (self.0)(req)
    }
}
