//! The hand-written lexer: source text to tokens with byte spans.

use serde_json::Number;

use super::MAX_SOURCE_LEN;
use super::ast::Span;
use super::error::{ExprError, ExprErrorKind, position};

/// Words with a meaning of their own: never roots (they may still be field names after `.`).
pub(crate) const KEYWORDS: [&str; 7] = ["true", "false", "null", "and", "or", "not", "in"];

/// Whether `s` is an identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Num(Number),
    Str(String),
    /// An identifier or keyword; the parser decides which by position.
    Ident(String),
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    AndAnd,
    OrOr,
    Bang,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Dot,
    Pipe,
    Colon,
    /// End of the expression: end of input, or the `}}` closing a placeholder.
    End,
}

impl Tok {
    pub(crate) fn is_word(&self, word: &str) -> bool {
        matches!(self, Tok::Ident(w) if w == word)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Where the expression ends.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// At the end of the input (a condition).
    EndOfInput,
    /// At the `}}` closing a placeholder that opened (`{{`) at this byte offset.
    CloseBraces { open: usize },
}

/// Lexes `src` from byte `start` to the stop. The last token is [`Tok::End`]; for
/// [`Stop::CloseBraces`] its span is the `}}`.
pub(crate) fn lex(src: &str, start: usize, stop: Stop) -> Result<Vec<Token>, ExprError> {
    Lexer {
        src,
        pos: start,
        start,
        stop,
    }
    .run()
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    start: usize,
    stop: Stop,
}

impl Lexer<'_> {
    fn error(
        &self,
        kind: ExprErrorKind,
        span: std::ops::Range<usize>,
        message: String,
    ) -> ExprError {
        ExprError::new(kind, self.src, span, message)
    }

    fn at(&self, offset: usize) -> String {
        position(self.src, offset)
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn run(mut self) -> Result<Vec<Token>, ExprError> {
        let mut tokens = Vec::new();
        loop {
            while self.peek().is_some_and(char::is_whitespace) {
                self.pos += self.peek().map_or(0, char::len_utf8);
            }
            let begin = self.pos;
            if let Stop::CloseBraces { .. } = self.stop
                && begin - self.start > MAX_SOURCE_LEN
            {
                return Err(self.too_long(begin));
            }
            let Some(c) = self.peek() else {
                if let Stop::CloseBraces { open } = self.stop {
                    return Err(self.error(
                        ExprErrorKind::UnterminatedPlaceholder,
                        open..open + 2,
                        format!(
                            "unterminated placeholder: expected `}}}}` to close the `{{{{` {}, \
                             found end of input",
                            self.at(open)
                        ),
                    ));
                }
                tokens.push(Token {
                    tok: Tok::End,
                    span: Span::new(begin, begin),
                });
                return Ok(tokens);
            };
            let tok = match c {
                '}' if matches!(self.stop, Stop::CloseBraces { .. })
                    && self.peek_at(1) == Some('}') =>
                {
                    tokens.push(Token {
                        tok: Tok::End,
                        span: Span::new(begin, begin + 2),
                    });
                    return Ok(tokens);
                }
                '0'..='9' => self.number()?,
                '"' | '\'' => self.string(c)?,
                c if c.is_ascii_alphabetic() || c == '_' => {
                    while self
                        .peek()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        self.pos += 1;
                    }
                    Tok::Ident(self.src[begin..self.pos].to_owned())
                }
                _ => self.punct(c)?,
            };
            tokens.push(Token {
                tok,
                span: Span::new(begin, self.pos),
            });
        }
    }

    fn too_long(&self, offset: usize) -> ExprError {
        self.error(
            ExprErrorKind::TooLong,
            offset..offset,
            format!(
                "expression too long {}: the limit is {MAX_SOURCE_LEN} bytes",
                self.at(offset)
            ),
        )
    }

    fn punct(&mut self, c: char) -> Result<Tok, ExprError> {
        let begin = self.pos;
        let next = self.peek_at(1);
        let (tok, len) = match (c, next) {
            ('=', Some('=')) => (Tok::EqEq, 2),
            ('!', Some('=')) => (Tok::NotEq, 2),
            ('<', Some('=')) => (Tok::Le, 2),
            ('>', Some('=')) => (Tok::Ge, 2),
            ('&', Some('&')) => (Tok::AndAnd, 2),
            ('|', Some('|')) => (Tok::OrOr, 2),
            ('<', _) => (Tok::Lt, 1),
            ('>', _) => (Tok::Gt, 1),
            ('!', _) => (Tok::Bang, 1),
            ('+', _) => (Tok::Plus, 1),
            ('-', _) => (Tok::Minus, 1),
            ('*', _) => (Tok::Star, 1),
            ('/', _) => (Tok::Slash, 1),
            ('%', _) => (Tok::Percent, 1),
            ('(', _) => (Tok::LParen, 1),
            (')', _) => (Tok::RParen, 1),
            ('[', _) => (Tok::LBracket, 1),
            (']', _) => (Tok::RBracket, 1),
            (',', _) => (Tok::Comma, 1),
            ('.', _) => (Tok::Dot, 1),
            ('|', _) => (Tok::Pipe, 1),
            (':', _) => (Tok::Colon, 1),
            _ => {
                let hint = match c {
                    '=' => "; use `==` to compare",
                    '&' => "; use `&&` (or `and`)",
                    _ => "",
                };
                return Err(self.error(
                    ExprErrorKind::UnexpectedCharacter,
                    begin..begin + c.len_utf8(),
                    format!("unexpected character `{c}` {}{hint}", self.at(begin)),
                ));
            }
        };
        self.pos += len;
        Ok(tok)
    }

    fn digits(&mut self) -> usize {
        let begin = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - begin
    }

    fn number(&mut self) -> Result<Tok, ExprError> {
        let begin = self.pos;
        self.digits();
        let mut integer = true;
        if self.peek() == Some('.') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            integer = false;
            self.pos += 1;
            self.digits();
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            integer = false;
            self.pos += 1;
            if matches!(self.peek(), Some('+' | '-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.invalid_number(begin, "the exponent has no digits"));
            }
        }
        if self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            while self
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                self.pos += 1;
            }
            return Err(self.invalid_number(begin, "a number cannot run into letters"));
        }
        let text = &self.src[begin..self.pos];
        if integer {
            if let Ok(n) = text.parse::<i64>() {
                return Ok(Tok::Num(n.into()));
            }
            if let Ok(n) = text.parse::<u64>() {
                return Ok(Tok::Num(n.into()));
            }
        }
        match text.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Ok(Tok::Num(n)),
            None => Err(self.invalid_number(begin, "it is out of range")),
        }
    }

    fn invalid_number(&self, begin: usize, why: &str) -> ExprError {
        self.error(
            ExprErrorKind::InvalidNumber,
            begin..self.pos,
            format!(
                "invalid number `{}` {}: {why}",
                &self.src[begin..self.pos],
                self.at(begin)
            ),
        )
    }

    fn string(&mut self, quote: char) -> Result<Tok, ExprError> {
        let begin = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error(
                    ExprErrorKind::UnterminatedString,
                    begin..self.src.len(),
                    format!(
                        "unterminated string starting {}: expected a closing `{quote}`, \
                         found end of input",
                        self.at(begin)
                    ),
                ));
            };
            let at = self.pos;
            self.pos += c.len_utf8();
            match c {
                c if c == quote => return Ok(Tok::Str(out)),
                '\\' => {
                    let Some(escaped) = self.peek() else {
                        continue; // end of input: reported as an unterminated string
                    };
                    let ch = match escaped {
                        '\\' => '\\',
                        '"' => '"',
                        '\'' => '\'',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        _ => {
                            let end = self.pos + escaped.len_utf8();
                            return Err(self.error(
                                ExprErrorKind::InvalidEscape,
                                at..end,
                                format!(
                                    "invalid escape `{}` {}: expected one of \
                                     \\\\ \\\" \\' \\n \\r \\t",
                                    &self.src[at..end],
                                    self.at(at)
                                ),
                            ));
                        }
                    };
                    self.pos += 1;
                    out.push(ch);
                }
                c => out.push(c),
            }
        }
    }
}
