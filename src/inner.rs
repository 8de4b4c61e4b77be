//! The inner-service accessors every middleware service has, written once.

/// `get_ref`, `get_mut` and `into_inner` for a service whose wrapped service is the field
/// `inner`, as tower's middleware have them. Used inside an `impl<S, …> Service<S, …>` block;
/// an optional string adds a sentence to `into_inner`'s docs.
macro_rules! inner_accessors {
    () => {
        inner_accessors!("");
    };
    ($into_inner_note:literal) => {
        /// A reference to the inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// A mutable reference to the inner service.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        #[doc = $into_inner_note]
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}
