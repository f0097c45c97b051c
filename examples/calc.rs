//! A small arithmetic evaluator: `+ - * /`, parentheses, unary minus, decimal numbers.

use std::fmt;

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalcError {
    /// A character that is not part of the grammar, at a byte offset.
    Unexpected {
        /// Byte offset.
        at: usize,
        /// What was found (`end of input` at the end).
        found: String,
    },
    /// Division by zero.
    DivisionByZero,
    /// A number that does not parse.
    BadNumber(String),
    /// Parentheses or unary minus nested deeper than [`MAX_DEPTH`], at a byte offset.
    TooDeep {
        /// Byte offset.
        at: usize,
    },
}

/// How deeply parentheses and unary minus may nest. The parser recurses once per level, so
/// without a bound a long run of `(` overflows the thread's stack, and a stack overflow aborts
/// the whole process (it is not a panic: `catch_unwind` cannot stop it).
pub const MAX_DEPTH: usize = 256;

impl fmt::Display for CalcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CalcError::Unexpected { at, found } => write!(f, "unexpected {found} at offset {at}"),
            CalcError::DivisionByZero => f.write_str("division by zero"),
            CalcError::BadNumber(n) => write!(f, "bad number `{n}`"),
            CalcError::TooDeep { at } => write!(
                f,
                "nested deeper than {MAX_DEPTH} levels at offset {at}: simplify the expression"
            ),
        }
    }
}

impl std::error::Error for CalcError {}

/// Evaluates an arithmetic expression.
///
/// ```
/// assert_eq!(soorma_examples::calc::eval("2 * (3 + 4) - -1").unwrap(), 15.0);
/// assert!(soorma_examples::calc::eval("1 / 0").is_err());
/// ```
pub fn eval(expression: &str) -> Result<f64, CalcError> {
    let mut p = Parser {
        s: expression.as_bytes(),
        i: 0,
        depth: 0,
    };
    let v = p.expr()?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.unexpected());
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn unexpected(&self) -> CalcError {
        CalcError::Unexpected {
            at: self.i,
            found: match self.s.get(self.i) {
                Some(c) => format!("`{}`", *c as char),
                None => "end of input".into(),
            },
        }
    }

    fn expr(&mut self) -> Result<f64, CalcError> {
        let mut v = self.term()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.term()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<f64, CalcError> {
        let mut v = self.factor()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            let r = self.factor()?;
            if op == b'*' {
                v *= r;
            } else if r == 0.0 {
                return Err(CalcError::DivisionByZero);
            } else {
                v /= r;
            }
        }
        Ok(v)
    }

    fn factor(&mut self) -> Result<f64, CalcError> {
        if self.depth >= MAX_DEPTH {
            return Err(CalcError::TooDeep { at: self.i });
        }
        self.depth += 1;
        let v = self.factor_inner();
        self.depth -= 1;
        v
    }

    fn factor_inner(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some(b'-') => {
                self.i += 1;
                Ok(-self.factor()?)
            }
            Some(b'(') => {
                self.i += 1;
                let v = self.expr()?;
                if self.peek() != Some(b')') {
                    return Err(self.unexpected());
                }
                self.i += 1;
                Ok(v)
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.')
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or_default();
                text.parse()
                    .map_err(|_| CalcError::BadNumber(text.to_owned()))
            }
            _ => Err(self.unexpected()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_with_precedence() {
        assert_eq!(eval("1 + 2 * 3").unwrap(), 7.0);
        assert_eq!(eval("(1 + 2) * 3").unwrap(), 9.0);
        assert_eq!(eval("10 / 4").unwrap(), 2.5);
        assert_eq!(eval("-(2 - 5)").unwrap(), 3.0);
    }

    #[test]
    fn reports_errors() {
        assert_eq!(eval("1 / (2 - 2)"), Err(CalcError::DivisionByZero));
        assert!(matches!(eval("1 +"), Err(CalcError::Unexpected { .. })));
        assert!(matches!(
            eval("2 x"),
            Err(CalcError::Unexpected { at: 2, .. })
        ));
        assert!(matches!(eval("1.2.3"), Err(CalcError::BadNumber(_))));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        // On the stack a tokio worker thread has (2 MiB): without the bound this aborts the
        // process.
        let deep = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(|| {
                let parens = format!("{}1{}", "(".repeat(200_000), ")".repeat(200_000));
                let minus = format!("{}1", "-".repeat(200_000));
                (eval(&parens), eval(&minus))
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(deep.0, Err(CalcError::TooDeep { at: MAX_DEPTH }));
        assert!(matches!(deep.1, Err(CalcError::TooDeep { .. })));
        assert!(
            deep.0
                .unwrap_err()
                .to_string()
                .contains("nested deeper than")
        );
        let ok = format!(
            "{}1{}",
            "(".repeat(MAX_DEPTH - 1),
            ")".repeat(MAX_DEPTH - 1)
        );
        assert_eq!(eval(&ok), Ok(1.0));
    }
}
