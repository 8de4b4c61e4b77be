//! [`Resource`] and [`Cost`]: what a quota counts, and what a request costs of each.

use std::borrow::Cow;
use std::fmt;

use crate::Priority;

/// A resource a quota counts: requests (the default), tokens, or any other a user names.
///
/// ```
/// use tower_throttle::Resource;
///
/// assert_eq!(Resource::TOKENS.name(), "tokens");
/// assert_eq!(Resource::new("images"), Resource::from(String::from("images")));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Resource(Cow<'static, str>);

impl Resource {
    /// Requests: what every quota counts unless told otherwise.
    pub const REQUESTS: Resource = Resource::new("requests");
    /// Tokens, input and output together.
    pub const TOKENS: Resource = Resource::new("tokens");
    /// Input (prompt) tokens.
    pub const INPUT_TOKENS: Resource = Resource::new("input-tokens");
    /// Output (completion) tokens.
    pub const OUTPUT_TOKENS: Resource = Resource::new("output-tokens");

    /// The resource called `name`.
    pub const fn new(name: &'static str) -> Self {
        Resource(Cow::Borrowed(name))
    }

    /// Its name: `requests`, `tokens`, `input-tokens`, `output-tokens`, or the user's.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl From<String> for Resource {
    fn from(name: String) -> Self {
        Resource(Cow::Owned(name))
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a request costs, per [`Resource`]: a number of requests (one, unless told
/// otherwise) and any amount of other resources. A quota of a [`Plan`](crate::Plan) counts
/// one resource and is charged that resource's amount; a resource a cost does not name costs
/// nothing, and its quotas do not hold the request back.
///
/// ```
/// use tower_throttle::{Cost, Resource};
///
/// let cost = Cost::new().and(Resource::TOKENS, 1_200);
/// assert_eq!(cost.of(&Resource::REQUESTS), 1);
/// assert_eq!(cost.of(&Resource::TOKENS), 1_200);
/// assert_eq!(Cost::from(3).of(&Resource::REQUESTS), 3);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Cost {
    requests: u32,
    /// The other resources it names (none for a number of requests: nothing allocated).
    others: Vec<(Resource, u32)>,
    priority: Priority,
}

impl Cost {
    /// One request.
    pub fn new() -> Self {
        Cost::from(1)
    }

    /// The cost with `amount` of `resource` (in place of what it had of it).
    pub fn and(mut self, resource: Resource, amount: u32) -> Self {
        if resource == Resource::REQUESTS {
            self.requests = amount;
        } else if let Some((_, a)) = self.others.iter_mut().find(|(r, _)| *r == resource) {
            *a = amount;
        } else {
            self.others.push((resource, amount));
        }
        self
    }

    /// The amount of `resource` (0 when the cost does not name it).
    pub fn of(&self, resource: &Resource) -> u32 {
        if *resource == Resource::REQUESTS {
            return self.requests;
        }
        self.others
            .iter()
            .find(|(r, _)| r == resource)
            .map_or(0, |(_, a)| *a)
    }

    /// The class the request waits in ([`Priority::Normal`] unless told otherwise): see
    /// [`Priority`].
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The class it waits in.
    pub(crate) fn class(&self) -> Priority {
        self.priority
    }

    /// Whether it costs nothing of any resource.
    pub(crate) fn is_free(&self) -> bool {
        self.requests == 0 && self.others.iter().all(|(_, a)| *a == 0)
    }
}

impl Default for Cost {
    fn default() -> Self {
        Cost::new()
    }
}

impl From<u32> for Cost {
    /// `n` requests.
    fn from(n: u32) -> Self {
        Cost {
            requests: n,
            others: Vec::new(),
            priority: Priority::Normal,
        }
    }
}

impl fmt::Debug for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let requests = (&Resource::REQUESTS, &self.requests);
        f.debug_map()
            .entries(std::iter::once(requests).chain(self.others.iter().map(|(r, a)| (r, a))))
            .finish()
    }
}
