//! [`Priority`]: the class a request waits in.

/// The class a request waits in when a [`Bucket`](crate::Bucket) is saturated: waiters are
/// served by class with weighted fair shares (6 : 3 : 1 unless
/// [`BucketBuilder::priority_weights`](crate::BucketBuilder::priority_weights) says
/// otherwise), first come, first served within a class. Under saturation each class is
/// admitted its share of the rate; an idle class's share goes to the others; no class
/// starves. Give it to a request with [`Cost::priority`](crate::Cost::priority) or
/// [`Acquire::priority`](crate::Acquire::priority), or put it in an `http` request's
/// extensions for [`Priority::of`].
///
/// ```
/// use tower_throttle::Priority;
///
/// assert_eq!(Priority::from_name("background"), Priority::Background);
/// assert_eq!(Priority::from_name("urgent!"), Priority::Normal); // unknown: the default
///
/// let mut request = http::Request::new(());
/// assert_eq!(Priority::of(&request), Priority::Normal);
/// request.extensions_mut().insert(Priority::Critical);
/// assert_eq!(Priority::of(&request), Priority::Critical);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Priority {
    /// Interactive and paid traffic, health checks: the largest share.
    Critical,
    /// The default.
    #[default]
    Normal,
    /// Batch work: the smallest share, never starved.
    Background,
}

impl Priority {
    /// How many classes there are.
    pub(crate) const COUNT: usize = 3;

    /// Its place among the classes, highest first.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The class called `name` (`critical`, `normal`, `background`, in any case); any other
    /// name is [`Priority::Normal`].
    pub fn from_name(name: &str) -> Priority {
        [Priority::Critical, Priority::Background]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
            .unwrap_or_default()
    }

    /// Its name: `critical`, `normal` or `background`.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Normal => "normal",
            Priority::Background => "background",
        }
    }

    /// The class in `request`'s extensions, else [`Priority::Normal`].
    pub fn of<B>(request: &http::Request<B>) -> Priority {
        request.extensions().get().copied().unwrap_or_default()
    }
}
