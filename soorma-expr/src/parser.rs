//! The parser: recursive descent, with precedence climbing for the binary operators. Tokens
//! to [`Expr`], checking roots, functions, arity and the nesting limit.

use serde_json::{Number, Value};

use super::ast::{ArithOp, CmpOp, Expr, Func, LogicOp, Node, Path, Segment, Span};
use super::error::{ExprError, ExprErrorKind, position};
use super::lexer::{KEYWORDS, Stop, Tok, Token, lex};
use super::{MAX_DEPTH, MAX_SOURCE_LEN, Roots};

/// Errors are boxed inside the parser: a small `Result` keeps the recursive frames small.
type Result<T> = std::result::Result<T, Box<ExprError>>;

// Binding levels, loosest first (`!`/`not` as a `not_expr` sits between `&&` and comparisons).
const OR: u8 = 1;
const AND: u8 = 2;
const NOT: u8 = 3;
const CMP: u8 = 4;
const IN: u8 = 5;
const ADD: u8 = 6;
const MUL: u8 = 7;
const UNARY: u8 = 8;

#[derive(Debug, Clone, Copy)]
enum BinOp {
    Logic(LogicOp),
    Cmp(CmpOp),
    In(bool),
    Arith(ArithOp),
}

/// `lhs op rhs`, extending `lhs` when it is a chain of the same level (`a && b` + `&& c`,
/// `a + b` + `- c`) so left-associative chains stay flat.
fn combine(lhs: Expr, op: BinOp, op_span: Span, rhs: Expr) -> Expr {
    let span = lhs.span.to(rhs.span);
    let node = match (op, lhs.node) {
        (
            BinOp::Logic(op),
            Node::Logic {
                op: prev,
                mut operands,
            },
        ) if prev == op => {
            operands.push(rhs);
            Node::Logic { op, operands }
        }
        (BinOp::Arith(op), Node::Arith { first, mut rest })
            if rest
                .first()
                .is_some_and(|(prev, _, _)| prev.level() == op.level()) =>
        {
            rest.push((op, op_span, rhs));
            Node::Arith { first, rest }
        }
        (op, node) => {
            let lhs = Expr {
                node,
                span: lhs.span,
            };
            match op {
                BinOp::Logic(op) => Node::Logic {
                    op,
                    operands: vec![lhs, rhs],
                },
                BinOp::Cmp(op) => Node::Compare {
                    op,
                    op_span,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
                BinOp::In(negated) => Node::In {
                    negated,
                    op_span,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
                BinOp::Arith(op) => Node::Arith {
                    first: Box::new(lhs),
                    rest: vec![(op, op_span, rhs)],
                },
            }
        }
    };
    Expr { node, span }
}

/// Parses a whole condition.
pub(crate) fn parse_condition(src: &str, roots: &Roots) -> std::result::Result<Expr, ExprError> {
    if src.len() > MAX_SOURCE_LEN {
        let mut at = MAX_SOURCE_LEN;
        while !src.is_char_boundary(at) {
            at -= 1;
        }
        return Err(ExprError::new(
            ExprErrorKind::TooLong,
            src,
            at..src.len(),
            format!(
                "expression too long: {} bytes, the limit is {MAX_SOURCE_LEN} (the excess starts {})",
                src.len(),
                position(src, at)
            ),
        ));
    }
    let tokens = lex(src, 0, Stop::EndOfInput)?;
    let mut p = Parser::new(src, tokens, roots, false);
    let expr = p.parse_or().map_err(|e| *e)?;
    p.expect_end().map_err(|e| *e)?;
    Ok(expr)
}

/// A parsed placeholder: `{{ expr | default: literal }}`.
pub(crate) struct Placeholder {
    pub expr: Expr,
    pub default: Option<Value>,
    /// The byte offset just past the closing `}}`.
    pub end: usize,
}

/// Parses the placeholder whose `{{` is at byte `open` of `src`.
pub(crate) fn parse_placeholder(
    src: &str,
    open: usize,
    roots: &Roots,
) -> std::result::Result<Placeholder, ExprError> {
    placeholder(src, open, roots).map_err(|e| *e)
}

fn placeholder(src: &str, open: usize, roots: &Roots) -> Result<Placeholder> {
    let tokens = lex(src, open + 2, Stop::CloseBraces { open }).map_err(Box::new)?;
    let end = tokens.last().map_or(src.len(), |t| t.span.end);
    let mut p = Parser::new(src, tokens, roots, true);
    let expr = p.parse_or()?;
    let mut default = None;
    if p.peek() == &Tok::Pipe {
        p.advance();
        let name = p.current().clone();
        match &name.tok {
            Tok::Ident(f) if f == "default" => p.advance(),
            Tok::Ident(f) => {
                return Err(p.error(
                    ExprErrorKind::UnknownFilter,
                    name.span,
                    format!(
                        "unknown filter `{f}` {}: the only filter is `default` \
                         (as in `| default: 10`)",
                        p.at(name.span.start)
                    ),
                ));
            }
            _ => return Err(p.expected("a filter name (`default`)")),
        }
        if p.peek() != &Tok::Colon {
            return Err(p.expected("`:` after `default`"));
        }
        p.advance();
        default = Some(p.parse_literal()?);
    }
    p.expect_end()?;
    Ok(Placeholder { expr, default, end })
}

struct Parser<'s> {
    src: &'s str,
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    roots: &'s Roots,
    placeholder: bool,
}

impl<'s> Parser<'s> {
    fn new(src: &'s str, tokens: Vec<Token>, roots: &'s Roots, placeholder: bool) -> Self {
        Self {
            src,
            tokens,
            pos: 0,
            depth: 0,
            roots,
            placeholder,
        }
    }

    // ---- token access and errors ----

    fn current(&self) -> &Token {
        // The lexer always ends the list with `Tok::End`, and the parser never moves past it.
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn peek(&self) -> &Tok {
        &self.current().tok
    }

    fn peek_second(&self) -> &Tok {
        &self.tokens[(self.pos + 1).min(self.tokens.len() - 1)].tok
    }

    fn advance(&mut self) {
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
    }

    fn at(&self, offset: usize) -> String {
        position(self.src, offset)
    }

    fn error(&self, kind: ExprErrorKind, span: Span, message: String) -> Box<ExprError> {
        Box::new(ExprError::new(kind, self.src, span.range(), message))
    }

    /// How the current token reads in a message: `` `foo` ``, or `end of input`.
    fn found(&self) -> String {
        let token = self.current();
        if token.tok == Tok::End {
            return if self.placeholder {
                "`}}`".to_owned()
            } else {
                "end of input".to_owned()
            };
        }
        let text = &self.src[token.span.range()];
        let mut chars = text.chars();
        let short: String = chars.by_ref().take(30).collect();
        let more = if chars.next().is_some() { "..." } else { "" };
        format!("`{short}{more}`")
    }

    /// `expected {what} at column N, found {token}`.
    fn expected(&self, what: &str) -> Box<ExprError> {
        let span = self.current().span;
        self.error(
            ExprErrorKind::UnexpectedToken,
            span,
            format!(
                "expected {what} {}, found {}",
                self.at(span.start),
                self.found()
            ),
        )
    }

    /// After a complete expression, the input (or the placeholder) must end.
    fn expect_end(&self) -> Result<()> {
        match self.peek() {
            Tok::End => Ok(()),
            Tok::RParen => {
                let span = self.current().span;
                Err(self.error(
                    ExprErrorKind::UnexpectedToken,
                    span,
                    format!("unmatched `)` {}", self.at(span.start)),
                ))
            }
            _ if self.placeholder => {
                Err(self.expected("an operator, `| default: ...` or `}}` to close the placeholder"))
            }
            _ => Err(self.expected("an operator or end of input")),
        }
    }

    /// Enters one nesting level; `opener` is the token that opens it.
    fn enter(&mut self, opener: Span) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.too_deep(opener));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    #[cold]
    #[inline(never)]
    fn too_deep(&self, opener: Span) -> Box<ExprError> {
        self.error(
            ExprErrorKind::TooDeep,
            opener,
            format!(
                "expression nests too deeply {}: the limit is {MAX_DEPTH} levels \
                 of parentheses, brackets, calls and prefix operators",
                self.at(opener.start)
            ),
        )
    }

    // ---- the grammar: precedence climbing over the levels of the module docs ----

    /// A whole expression (`or_expr`).
    fn parse_or(&mut self) -> Result<Expr> {
        self.parse_expr(0)
    }

    /// The binary operator at the current token: the operator, its level, its span and how
    /// many tokens it takes (`not in` takes two).
    fn binary_op(&self) -> Option<(BinOp, u8, Span, usize)> {
        let span = self.current().span;
        let (op, level) = match self.peek() {
            Tok::OrOr => (BinOp::Logic(LogicOp::Or), OR),
            Tok::AndAnd => (BinOp::Logic(LogicOp::And), AND),
            Tok::Ident(w) if w == "or" => (BinOp::Logic(LogicOp::Or), OR),
            Tok::Ident(w) if w == "and" => (BinOp::Logic(LogicOp::And), AND),
            Tok::EqEq => (BinOp::Cmp(CmpOp::Eq), CMP),
            Tok::NotEq => (BinOp::Cmp(CmpOp::Ne), CMP),
            Tok::Lt => (BinOp::Cmp(CmpOp::Lt), CMP),
            Tok::Le => (BinOp::Cmp(CmpOp::Le), CMP),
            Tok::Gt => (BinOp::Cmp(CmpOp::Gt), CMP),
            Tok::Ge => (BinOp::Cmp(CmpOp::Ge), CMP),
            Tok::Ident(w) if w == "in" => (BinOp::In(false), IN),
            Tok::Ident(w) if w == "not" && self.peek_second().is_word("in") => {
                let end = self.tokens[self.pos + 1].span;
                return Some((BinOp::In(true), IN, span.to(end), 2));
            }
            Tok::Plus => (BinOp::Arith(ArithOp::Add), ADD),
            Tok::Minus => (BinOp::Arith(ArithOp::Sub), ADD),
            Tok::Star => (BinOp::Arith(ArithOp::Mul), MUL),
            Tok::Slash => (BinOp::Arith(ArithOp::Div), MUL),
            Tok::Percent => (BinOp::Arith(ArithOp::Rem), MUL),
            _ => return None,
        };
        Some((op, level, span, 1))
    }

    /// Operators of level `min` and tighter, left to right; comparisons and `in` do not chain.
    fn parse_expr(&mut self, min: u8) -> Result<Expr> {
        let mut lhs = self.parse_prefix(min)?;
        let mut last_level = None;
        while let Some((op, level, op_span, tokens)) = self.binary_op() {
            if level < min {
                break;
            }
            if (level == CMP || level == IN) && last_level == Some(level) {
                return Err(self.chained(level, op_span));
            }
            for _ in 0..tokens {
                self.advance();
            }
            let rhs = self.parse_expr(level + 1)?;
            lhs = combine(lhs, op, op_span, rhs);
            last_level = Some(level);
        }
        Ok(lhs)
    }

    #[cold]
    #[inline(never)]
    fn chained(&self, level: u8, span: Span) -> Box<ExprError> {
        let message = if level == CMP {
            format!(
                "comparisons cannot be chained {}: write `a < b && b < c`, or use parentheses",
                self.at(span.start)
            )
        } else {
            format!(
                "`in` cannot be chained {}: use parentheses",
                self.at(span.start)
            )
        };
        self.error(ExprErrorKind::ChainedComparison, span, message)
    }

    /// Prefix operators, then a primary. Where `!`/`not` may start a `not_expr` (`min` at most
    /// the `!` level) it covers a whole comparison; elsewhere it binds like unary `-`.
    fn parse_prefix(&mut self, min: u8) -> Result<Expr> {
        let negate = self.peek() == &Tok::Minus;
        if !(negate || self.peek() == &Tok::Bang || self.peek().is_word("not")) {
            return self.parse_primary();
        }
        let op = self.current().span;
        self.advance();
        self.enter(op)?;
        let operand = if !negate && min <= NOT {
            self.parse_expr(NOT)?
        } else {
            self.parse_prefix(UNARY)?
        };
        self.leave();
        let span = op.to(operand.span);
        let operand = Box::new(operand);
        let node = if negate {
            Node::Neg(operand)
        } else {
            Node::Not(operand)
        };
        Ok(Expr { node, span })
    }

    fn parse_primary(&mut self) -> Result<Expr> {
        let span = self.current().span;
        let value = match self.peek() {
            Tok::Num(n) => Value::Number(n.clone()),
            Tok::Str(s) => Value::String(s.clone()),
            Tok::Ident(w) if w == "true" => Value::Bool(true),
            Tok::Ident(w) if w == "false" => Value::Bool(false),
            Tok::Ident(w) if w == "null" => Value::Null,
            Tok::Ident(w) if KEYWORDS.contains(&w.as_str()) => {
                return Err(self.expected("an expression"));
            }
            Tok::Ident(name) => {
                let name = name.clone();
                return if self.peek_second() == &Tok::LParen {
                    self.parse_call(&name, span)
                } else {
                    self.parse_path(&name, span)
                };
            }
            Tok::LParen => return self.parse_parenthesized(span),
            Tok::LBracket => return self.parse_array(span),
            _ => return Err(self.expected("an expression")),
        };
        self.advance();
        Ok(Expr {
            node: Node::Lit(value),
            span,
        })
    }

    /// `"(" or_expr ")"`, the current token being the `(`.
    fn parse_parenthesized(&mut self, open: Span) -> Result<Expr> {
        self.advance();
        self.enter(open)?;
        let inner = self.parse_expr(0)?;
        self.leave();
        if self.peek() != &Tok::RParen {
            return Err(self.unclosed_paren(open));
        }
        let close = self.current().span;
        self.advance();
        Ok(Expr {
            node: inner.node,
            span: open.to(close),
        })
    }

    #[cold]
    #[inline(never)]
    fn unclosed_paren(&self, open: Span) -> Box<ExprError> {
        let mut err = self.expected("`)`");
        err.message
            .push_str(&format!(" (to close the `(` {})", self.at(open.start)));
        err
    }

    /// `"[" [ or_expr { "," or_expr } [","] ] "]"`, the current token being the `[`.
    fn parse_array(&mut self, open: Span) -> Result<Expr> {
        self.advance();
        self.enter(open)?;
        let items = self.parse_list(&Tok::RBracket, "`]`")?;
        self.leave();
        let close = self.current().span;
        self.advance();
        Ok(Expr {
            node: Node::Array(items),
            span: open.to(close),
        })
    }

    /// `[ or_expr { "," or_expr } [","] ]` up to (not past) `close`.
    fn parse_list(&mut self, close: &Tok, close_name: &str) -> Result<Vec<Expr>> {
        let mut items = Vec::new();
        while self.peek() != close {
            items.push(self.parse_expr(0)?);
            if self.peek() == &Tok::Comma {
                self.advance();
            } else if self.peek() != close {
                return Err(self.expected_either(close_name));
            }
        }
        Ok(items)
    }

    #[cold]
    #[inline(never)]
    fn expected_either(&self, close_name: &str) -> Box<ExprError> {
        self.expected(&format!("`,` or {close_name}"))
    }

    fn parse_call(&mut self, name: &str, name_span: Span) -> Result<Expr> {
        let Some(func) = Func::from_name(name) else {
            let known: Vec<_> = Func::ALL.iter().map(|f| f.name()).collect();
            return Err(self.error(
                ExprErrorKind::UnknownFunction,
                name_span,
                format!(
                    "unknown function `{name}` {}; the functions are: {}",
                    self.at(name_span.start),
                    known.join(", ")
                ),
            ));
        };
        self.advance(); // the name
        let open = self.current().span;
        self.advance(); // `(`
        self.enter(open)?;
        let args = self.parse_list(&Tok::RParen, "`)`")?;
        self.leave();
        let close = self.current().span;
        self.advance();
        let span = name_span.to(close);
        if args.len() != func.arity() {
            let n = func.arity();
            return Err(self.error(
                ExprErrorKind::WrongArity,
                span,
                format!(
                    "wrong number of arguments {}: `{name}` takes {n}, found {}",
                    self.at(name_span.start),
                    args.len()
                ),
            ));
        }
        if func == Func::Exists && !matches!(args[0].node, Node::Path(_)) {
            return Err(self.error(
                ExprErrorKind::InvalidArgument,
                args[0].span,
                format!(
                    "`exists` takes a path (like `data.field`) {}",
                    self.at(args[0].span.start)
                ),
            ));
        }
        Ok(Expr {
            node: Node::Call { func, args },
            span,
        })
    }

    fn parse_path(&mut self, root: &str, root_span: Span) -> Result<Expr> {
        if !self.roots.contains(root) {
            return Err(self.unknown_root(root, root_span));
        }
        self.advance();
        let mut segments = Vec::new();
        let mut end = root_span;
        loop {
            match self.peek() {
                Tok::Dot => {
                    self.advance();
                    let token = self.current().clone();
                    match token.tok {
                        Tok::Ident(name) => segments.push(Segment::Key(name)),
                        Tok::Num(_) => {
                            let mut err = self.expected("a field name after `.`");
                            err.message.push_str(&format!(
                                " (write `[{}]` for an array index)",
                                &self.src[token.span.range()]
                            ));
                            return Err(err);
                        }
                        _ => return Err(self.expected("a field name after `.`")),
                    }
                    end = token.span;
                    self.advance();
                }
                Tok::LBracket => {
                    self.advance();
                    let token = self.current().clone();
                    let segment = match &token.tok {
                        Tok::Str(key) => Segment::Key(key.clone()),
                        Tok::Num(n) => match n.as_u64().and_then(|i| usize::try_from(i).ok()) {
                            Some(i) => Segment::Index(i),
                            None => {
                                return Err(self.expected(
                                    "an index (a non-negative integer) or a quoted key",
                                ));
                            }
                        },
                        _ => {
                            return Err(
                                self.expected("an index (a non-negative integer) or a quoted key")
                            );
                        }
                    };
                    self.advance();
                    if self.peek() != &Tok::RBracket {
                        return Err(self.expected("`]`"));
                    }
                    end = self.current().span;
                    self.advance();
                    segments.push(segment);
                }
                _ => break,
            }
        }
        Ok(Expr {
            node: Node::Path(Path::new(root.to_owned(), segments)),
            span: root_span.to(end),
        })
    }

    fn unknown_root(&self, name: &str, span: Span) -> Box<ExprError> {
        let mut message = if self.roots.names().next().is_none() {
            format!(
                "unknown root `{name}` {}; no roots are allowed here",
                self.at(span.start)
            )
        } else {
            format!(
                "unknown root `{name}` {}; expected one of: {}",
                self.at(span.start),
                self.roots
            )
        };
        if Func::from_name(name).is_some() {
            message.push_str(&format!(
                " (`{name}` is a function: call it as `{name}(...)`)"
            ));
        } else if let Some(close) = self
            .roots
            .names()
            .map(|r| (edit_distance(name, r), r))
            .filter(|(d, r)| *d <= 2 && *d < r.len().max(name.len()))
            .min_by_key(|(d, _)| *d)
        {
            message.push_str(&format!(" (did you mean `{}`?)", close.1));
        }
        self.error(ExprErrorKind::UnknownRoot, span, message)
    }

    /// A literal for `default`: a number (optionally negative), string, `true`, `false`,
    /// `null`, or an array of literals.
    fn parse_literal(&mut self) -> Result<Value> {
        let token = self.current().clone();
        let value = match &token.tok {
            Tok::Num(n) => Value::Number(n.clone()),
            Tok::Str(s) => Value::String(s.clone()),
            Tok::Ident(w) if w == "true" => Value::Bool(true),
            Tok::Ident(w) if w == "false" => Value::Bool(false),
            Tok::Ident(w) if w == "null" => Value::Null,
            Tok::Minus => {
                self.advance();
                let n = match self.peek() {
                    Tok::Num(n) => n.clone(),
                    _ => return Err(self.expected("a number after `-`")),
                };
                let negated = match n.as_i64() {
                    Some(i) if i != i64::MIN => Number::from(-i),
                    _ => n
                        .as_f64()
                        .and_then(|f| Number::from_f64(-f))
                        .unwrap_or(n.clone()),
                };
                Value::Number(negated)
            }
            Tok::LBracket => {
                self.advance();
                self.enter(token.span)?;
                let mut items = Vec::new();
                while self.peek() != &Tok::RBracket {
                    items.push(self.parse_literal()?);
                    if self.peek() == &Tok::Comma {
                        self.advance();
                    } else if self.peek() != &Tok::RBracket {
                        return Err(self.expected("`,` or `]`"));
                    }
                }
                self.leave();
                Value::Array(items)
            }
            _ => {
                return Err(self.expected("a literal (number, string, true, false, null or array)"));
            }
        };
        self.advance();
        Ok(value)
    }
}

/// Levenshtein distance, for "did you mean" hints (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}
