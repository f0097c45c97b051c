//! The root names a path may start with.

use std::fmt;

use super::error::{ExprError, ExprErrorKind};
use super::lexer::{KEYWORDS, is_identifier};

/// The names a path may start with (`data` in `data.count`), fixed when an expression is
/// parsed: a path with any other root is a parse error that lists these, so typos surface when
/// a plan is defined rather than when it runs.
///
/// At evaluation, root `r` is the context object's field `r`.
///
/// ```
/// use soorma_expr::{Condition, Roots};
/// let roots = Roots::new(["order", "customer"]).unwrap();
/// assert!(Condition::parse("order.total > 100 && customer.vip", &roots).is_ok());
/// let err = Condition::parse("data.total > 100", &roots).unwrap_err();
/// assert!(err.message.contains("expected one of: order, customer"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Roots {
    names: Vec<String>,
}

impl Roots {
    /// The planner's roots for transition conditions.
    ///
    /// ```
    /// assert_eq!(soorma_expr::Roots::CONDITION_ROOTS[0], "data");
    /// ```
    pub const CONDITION_ROOTS: [&'static str; 5] = ["data", "event", "goal", "results", "state"];

    /// The planner's roots for action data templates.
    ///
    /// ```
    /// assert_eq!(soorma_expr::Roots::TEMPLATE_ROOTS[0], "goal");
    /// ```
    pub const TEMPLATE_ROOTS: [&'static str; 4] = ["goal", "results", "state", "event"];

    /// A set of roots. Each name must be an identifier (ASCII letters, digits and `_`, not
    /// starting with a digit) and not a keyword (`true false null and or not in`); duplicates
    /// are dropped, the order is kept (error messages list the roots in it).
    ///
    /// ```
    /// use soorma_expr::{ExprErrorKind, Roots};
    /// assert_eq!(Roots::new(["a", "b", "a"]).unwrap().to_string(), "a, b");
    /// assert_eq!(Roots::new(["my-root"]).unwrap_err().kind, ExprErrorKind::InvalidRoot);
    /// assert_eq!(Roots::new(["not"]).unwrap_err().kind, ExprErrorKind::InvalidRoot);
    /// ```
    pub fn new<I, S>(names: I) -> Result<Self, ExprError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut roots = Vec::new();
        for name in names {
            let name = name.into();
            if !is_identifier(&name) {
                return Err(ExprError::new(
                    ExprErrorKind::InvalidRoot,
                    &name,
                    0..name.len(),
                    format!(
                        "invalid root name `{name}`: a root must be an identifier \
                         (ASCII letters, digits and `_`, not starting with a digit)"
                    ),
                ));
            }
            if KEYWORDS.contains(&name.as_str()) {
                return Err(ExprError::new(
                    ExprErrorKind::InvalidRoot,
                    &name,
                    0..name.len(),
                    format!("invalid root name `{name}`: it is a keyword"),
                ));
            }
            if !roots.contains(&name) {
                roots.push(name);
            }
        }
        Ok(Self { names: roots })
    }

    /// The roots of transition conditions: `data` (the triggering event's payload), `event`,
    /// `goal`, `results`, `state` ([`CONDITION_ROOTS`](Self::CONDITION_ROOTS)).
    ///
    /// ```
    /// let roots = soorma_expr::Roots::conditions();
    /// assert!(roots.contains("data") && !roots.contains("input"));
    /// ```
    pub fn conditions() -> Self {
        Self::from_static(&Self::CONDITION_ROOTS)
    }

    /// The roots of action data templates: `goal`, `results`, `state`, `event`
    /// ([`TEMPLATE_ROOTS`](Self::TEMPLATE_ROOTS)).
    ///
    /// ```
    /// let roots = soorma_expr::Roots::templates();
    /// assert!(roots.contains("results") && !roots.contains("data"));
    /// ```
    pub fn templates() -> Self {
        Self::from_static(&Self::TEMPLATE_ROOTS)
    }

    fn from_static(names: &[&str]) -> Self {
        Self {
            names: names.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Whether `name` is one of the roots.
    ///
    /// ```
    /// assert!(soorma_expr::Roots::templates().contains("goal"));
    /// ```
    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// The root names, in order.
    ///
    /// ```
    /// let roots = soorma_expr::Roots::templates();
    /// assert_eq!(roots.names().collect::<Vec<_>>(), ["goal", "results", "state", "event"]);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// The names, comma-separated.
///
/// ```
/// assert_eq!(soorma_expr::Roots::conditions().to_string(), "data, event, goal, results, state");
/// ```
impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names.join(", "))
    }
}
