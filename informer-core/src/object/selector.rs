//! Kubernetes label selectors: parsed once, matched without allocating.
//!
//! The grammar is the one the API server accepts for `labelSelector` (apimachinery's
//! `labels.Parse`):
//!
//! ```text
//! selector    ::= "" | requirement ( "," requirement )*
//! requirement ::= "!" KEY                        (the label is absent)
//!               | KEY                            (the label is present)
//!               | KEY ( "=" | "==" | "!=" ) VALUE
//!               | KEY ( ">" | "<" ) INTEGER
//!               | KEY ( "in" | "notin" ) "(" VALUE ( "," VALUE )* ")"
//! ```
//!
//! - KEY is `[prefix/]name`: `name` is 1 to 63 characters of `[A-Za-z0-9_.-]` that start and
//!   end with a letter or digit; the optional `prefix` is a DNS subdomain (lower-case labels
//!   of `[a-z0-9-]` separated by dots, at most 253 characters).
//! - VALUE is empty or up to 63 characters of the same set as a name. `x=` and `x in (a,)`
//!   hold empty values; `x in ()` is `x in ("")`, as the API server reads it.
//! - Spaces, tabs, carriage returns and newlines between tokens are ignored; `in` and `notin`
//!   are operators only right after a key (`in in (notin)` is valid).
//! - `>` and `<` compare the label's value as a 64-bit integer (a label that is not one does
//!   not match).
//!
//! [`Selector`]'s `Display` is the canonical form (requirements sorted by key, set values
//! sorted and deduplicated, single spaces around `in`/`notin`), which parses back to an equal
//! selector and can be sent as `labelSelector` as is.
//!
//! ```
//! use informer_core::object::selector::Selector;
//! use informer_core::object::StringMap;
//!
//! let sel: Selector = "tier in (web, api), env!=dev, !canary".parse().unwrap();
//! let labels: StringMap = [("tier", "web"), ("env", "prod")].into_iter().collect();
//! assert!(sel.matches(&labels));
//! assert_eq!(sel.to_string(), "!canary,env!=dev,tier in (api,web)");
//!
//! let err = "app in (a b)".parse::<Selector>().unwrap_err();
//! assert_eq!(err.position(), 10);
//! ```

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

use crate::object::string_map::{StringMap, StringMapRef};
use crate::object::{DynamicObject, ObjectMeta};

/// Anything whose labels can be looked up by key: what a [`Selector`] matches against.
///
/// Implemented for [`DynamicObject`], [`ObjectMeta`], [`StringMap`] and
/// `BTreeMap<String, String>`; implement it for your own object types (usually one line that
/// reads `metadata.labels`) to use selectors and label indices on them.
pub trait Labels {
    /// The value of label `key`, `None` when the label is absent.
    fn label(&self, key: &str) -> Option<&str>;

    /// Whether `other` certainly has exactly the labels `self` has, when that is cheap to
    /// tell (for example by comparing their encoded form at once); `false` when it cannot be
    /// told cheaply. A label index asks this first when an object is updated, so that an
    /// update that changed no label looks none up. The default says `false`.
    fn same_labels(&self, other: &Self) -> bool
    where
        Self: Sized,
    {
        let _ = other;
        false
    }
}

impl<T: Labels + ?Sized> Labels for &T {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

impl<T: Labels + ?Sized> Labels for Arc<T> {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

impl Labels for StringMap {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
    fn same_labels(&self, other: &Self) -> bool {
        self == other
    }
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels().get(key)
    }
    /// The two encoded label maps compared at once (one `memcmp`).
    fn same_labels(&self, other: &Self) -> bool {
        self.labels() == other.labels()
    }
}

impl Labels for StringMapRef<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
    fn same_labels(&self, other: &Self) -> bool {
        self == other
    }
}

impl Labels for DynamicObject {
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels().get(key)
    }
    /// The two encoded label maps compared at once (one `memcmp`).
    fn same_labels(&self, other: &Self) -> bool {
        self.metadata.same_labels(&other.metadata)
    }
}

/// How a [`Requirement`] relates its key to its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Operator {
    /// `key=value`: the label is present with that value.
    Equals,
    /// `key==value`: the same as [`Equals`](Self::Equals), kept apart to print as written.
    DoubleEquals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label is present with one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key`: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label is present and is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label is present and is an integer less than `n`.
    LessThan,
}

impl Operator {
    /// The operator as written between key and value(s), `""` for [`Exists`](Self::Exists)
    /// and `"!"` (written before the key) for [`DoesNotExist`](Self::DoesNotExist).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        }
    }
}

/// One term of a [`Selector`]: a key, an operator and the values it compares with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Box<str>,
    op: Operator,
    /// Sorted and deduplicated; exactly one for `=`, `==`, `!=`, `>`, `<`; none for
    /// `Exists`/`DoesNotExist`; at least one for `in`/`notin`.
    values: Box<[Box<str>]>,
    /// The value of `>`/`<` as an integer (0 otherwise).
    bound: i64,
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, sorted and without duplicates (none for `key` and `!key`).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> {
        self.values.iter().map(|v| &**v)
    }

    fn has_value(&self, value: &str) -> bool {
        self.values.binary_search_by(|v| (**v).cmp(value)).is_ok()
    }

    /// Whether labels `labels` satisfy this requirement (no allocation).
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        match self.op {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                value.is_some_and(|v| self.has_value(v))
            }
            Operator::NotEquals | Operator::NotIn => value.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| n > self.bound),
            Operator::LessThan => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| n < self.bound),
        }
    }

    /// The values this requirement needs the label to have, when it is a pure equality or
    /// set inclusion (`=`, `==`, `in`): an object matches only if its label is one of them.
    pub(crate) fn required_values(&self) -> Option<&[Box<str>]> {
        match self.op {
            Operator::Equals | Operator::DoubleEquals | Operator::In => Some(&self.values),
            _ => None,
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Operator::Exists => f.write_str(&self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::In | Operator::NotIn => {
                write!(f, "{} {} (", self.key, self.op.as_str())?;
                for (i, v) in self.values.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(v)?;
                }
                f.write_str(")")
            }
            _ => {
                f.write_str(&self.key)?;
                f.write_str(self.op.as_str())?;
                self.values.iter().try_for_each(|v| f.write_str(v))
            }
        }
    }
}

/// A parsed label selector: requirements that must all hold (comma means "and").
///
/// The empty selector (`""`, [`Selector::everything`]) matches every object. Parse with
/// [`Selector::parse`] or `str::parse`; print with `Display` (the canonical form, also what
/// `String::from(&selector)` gives for a server-side `labelSelector`). See the
/// [module documentation](self) for the grammar.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    /// Sorted by key (stable: equal keys keep their written order).
    reqs: Box<[Requirement]>,
}

impl Selector {
    /// The selector that matches everything (`""`).
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Parses a selector written in the Kubernetes grammar.
    ///
    /// Fails with a [`SelectorError`] whose [`position`](SelectorError::position) is the byte
    /// offset in `input` of the token at fault.
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        Parser::new(input).parse()
    }

    /// The selector requiring every `(key, value)` pair as `key=value` (a `matchLabels`).
    ///
    /// Fails with [`SelectorError::InvalidKey`] or [`SelectorError::InvalidValue`] (position
    /// 0, as there is no text) on a key or value the API server would reject.
    pub fn from_labels<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        for (key, value) in pairs {
            validate_key(key).map_err(|problem| SelectorError::InvalidKey {
                position: 0,
                problem,
            })?;
            validate_value(value).map_err(|problem| SelectorError::InvalidValue {
                position: 0,
                problem,
            })?;
            reqs.push(Requirement {
                key: key.into(),
                op: Operator::Equals,
                values: Box::new([value.into()]),
                bound: 0,
            });
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector { reqs: reqs.into() })
    }

    /// Whether this selector has no requirements (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }

    /// Whether `labels` satisfy every requirement. Allocates nothing.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        self.reqs.iter().all(|r| r.matches(labels))
    }

    /// The single value label `key` must have for this selector to match (`key=v`, `key==v`
    /// or `key in (v)`), as client-go's `RequiresExactMatch`: only the first requirement on
    /// `key` is looked at.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.reqs.iter().find(|r| &*r.key == key)?;
        match r.required_values()? {
            [v] => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Selector {
    /// The canonical form, e.g. `!canary,env!=dev,tier in (api,web)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            fmt::Display::fmt(r, f)?;
        }
        Ok(())
    }
}

impl FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Selector, SelectorError> {
        Selector::parse(s)
    }
}

impl From<&Selector> for String {
    /// The canonical form, for `labelSelector`.
    fn from(s: &Selector) -> String {
        alloc::format!("{s}")
    }
}

impl From<Selector> for String {
    /// The canonical form, for `labelSelector`.
    fn from(s: Selector) -> String {
        String::from(&s)
    }
}

/// A token of the selector grammar, as named in a [`SelectorError`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Token {
    /// The end of the input.
    End,
    /// `,`
    Comma,
    /// `(`
    OpenParen,
    /// `)`
    CloseParen,
    /// `!`
    Not,
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `!=`
    NotEquals,
    /// `>`
    GreaterThan,
    /// `<`
    LessThan,
    /// `in`
    In,
    /// `notin`
    NotIn,
    /// A key or value (any run of characters that are not whitespace or one of `=!(),<>`).
    Identifier(Box<str>),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Token::End => return f.write_str("end of input"),
            Token::Identifier(s) => return write!(f, "{s:?}"),
            Token::Comma => ",",
            Token::OpenParen => "(",
            Token::CloseParen => ")",
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::In => "in",
            Token::NotIn => "notin",
        };
        write!(f, "'{s}'")
    }
}

/// What the parser expected where a [`SelectorError::Unexpected`] occurred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expected {
    /// A requirement: a key or `!` (at the start, or after `,`).
    Requirement,
    /// A key (after `!`).
    Key,
    /// An operator after a key (`=`, `==`, `!=`, `in`, `notin`, `>`, `<`), or `,` / the end.
    Operator,
    /// `(` after `in`/`notin`.
    OpenParen,
    /// A value, `,` or `)` inside a value list.
    ListItem,
    /// `,` or `)` after a value in a list.
    CommaOrCloseParen,
    /// A value after `=`, `==`, `!=`, `>` or `<`.
    Value,
    /// `,` or the end after a complete requirement.
    CommaOrEnd,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expected::Requirement => "a label key or '!'",
            Expected::Key => "a label key",
            Expected::Operator => "one of '=', '==', '!=', 'in', 'notin', '>', '<', ',' or the end",
            Expected::OpenParen => "'('",
            Expected::ListItem => "a value, ',' or ')'",
            Expected::CommaOrCloseParen => "',' or ')'",
            Expected::Value => "a value",
            Expected::CommaOrEnd => "',' or the end",
        })
    }
}

/// Why a label key is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyProblem {
    /// The name part (after the optional `prefix/`) is empty.
    EmptyName,
    /// The name part is longer than 63 characters.
    NameTooLong,
    /// The name part has a character outside `[A-Za-z0-9_.-]`, or does not start and end
    /// with a letter or digit.
    InvalidName,
    /// `/name` with nothing before the slash.
    EmptyPrefix,
    /// The prefix is longer than 253 characters.
    PrefixTooLong,
    /// The prefix is not a DNS subdomain (lower-case `[a-z0-9-]` labels, each starting and
    /// ending with a letter or digit, separated by dots).
    InvalidPrefix,
    /// More than one `/`.
    TooManySlashes,
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyProblem::EmptyName => "the name part is empty",
            KeyProblem::NameTooLong => "the name part is longer than 63 characters",
            KeyProblem::InvalidName => {
                "the name part must be [A-Za-z0-9_.-] and start and end with a letter or digit"
            }
            KeyProblem::EmptyPrefix => "the prefix before '/' is empty",
            KeyProblem::PrefixTooLong => "the prefix is longer than 253 characters",
            KeyProblem::InvalidPrefix => "the prefix is not a lower-case DNS subdomain",
            KeyProblem::TooManySlashes => "a key has at most one '/'",
        })
    }
}

/// Why a label value is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueProblem {
    /// Longer than 63 characters.
    TooLong,
    /// A character outside `[A-Za-z0-9_.-]`, or not starting and ending with a letter or
    /// digit.
    InvalidCharacters,
}

impl fmt::Display for ValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueProblem::TooLong => "longer than 63 characters",
            ValueProblem::InvalidCharacters => {
                "must be empty or [A-Za-z0-9_.-] starting and ending with a letter or digit"
            }
        })
    }
}

/// A label selector that does not parse. Every variant says where: the byte offset in the
/// input of the token at fault ([`position`](Self::position)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectorError {
    /// A token that cannot stand here.
    Unexpected {
        /// Byte offset of the token.
        position: usize,
        /// The token found.
        found: Token,
        /// What could have stood here.
        expected: Expected,
    },
    /// A label key the API server would reject.
    InvalidKey {
        /// Byte offset of the key.
        position: usize,
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// A label value the API server would reject.
    InvalidValue {
        /// Byte offset of the value.
        position: usize,
        /// What is wrong with it.
        problem: ValueProblem,
    },
    /// The value of `>` or `<` is not a 64-bit integer.
    NotAnInteger {
        /// Byte offset of the value.
        position: usize,
    },
}

impl SelectorError {
    /// Byte offset in the input of the token at fault.
    pub fn position(&self) -> usize {
        match *self {
            SelectorError::Unexpected { position, .. }
            | SelectorError::InvalidKey { position, .. }
            | SelectorError::InvalidValue { position, .. }
            | SelectorError::NotAnInteger { position } => position,
        }
    }
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid label selector at byte {}: ", self.position())?;
        match self {
            SelectorError::Unexpected {
                found, expected, ..
            } => write!(f, "found {found}, expected {expected}"),
            SelectorError::InvalidKey { problem, .. } => write!(f, "invalid label key: {problem}"),
            SelectorError::InvalidValue { problem, .. } => {
                write!(f, "invalid label value: {problem}")
            }
            SelectorError::NotAnInteger { .. } => {
                f.write_str("the value of '>' or '<' must be a 64-bit integer")
            }
        }
    }
}

impl core::error::Error for SelectorError {}

/// Whether `s` is a label key the API server accepts (`[prefix/]name`).
pub fn validate_key(s: &str) -> Result<(), KeyProblem> {
    let mut parts = s.splitn(3, '/');
    let first = parts.next().unwrap_or_default();
    let (prefix, name) = match (parts.next(), parts.next()) {
        (None, _) => (None, first),
        (Some(name), None) => (Some(first), name),
        (Some(_), Some(_)) => return Err(KeyProblem::TooManySlashes),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(KeyProblem::EmptyPrefix);
        }
        if prefix.len() > 253 {
            return Err(KeyProblem::PrefixTooLong);
        }
        if !prefix.split('.').all(is_dns_label) {
            return Err(KeyProblem::InvalidPrefix);
        }
    }
    if name.is_empty() {
        return Err(KeyProblem::EmptyName);
    }
    if name.len() > 63 {
        return Err(KeyProblem::NameTooLong);
    }
    if !is_name(name) {
        return Err(KeyProblem::InvalidName);
    }
    Ok(())
}

/// Whether `s` is a label value the API server accepts (empty, or a name of at most 63
/// characters).
pub fn validate_value(s: &str) -> Result<(), ValueProblem> {
    if s.len() > 63 {
        Err(ValueProblem::TooLong)
    } else if !s.is_empty() && !is_name(s) {
        Err(ValueProblem::InvalidCharacters)
    } else {
        Ok(())
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            edge(first) && edge(last) && b.iter().all(|c| edge(c) || *c == b'-')
        }
        _ => false,
    }
}

/// A token's kind; identifiers borrow from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    End,
    Comma,
    OpenParen,
    CloseParen,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    In,
    NotIn,
    Ident(&'a str),
}

impl Tok<'_> {
    /// An identifier where a key or value is read: `in` and `notin` are plain words there.
    fn word(self) -> Option<&'static str> {
        match self {
            Tok::In => Some("in"),
            Tok::NotIn => Some("notin"),
            _ => None,
        }
    }

    fn to_token(self) -> Token {
        match self {
            Tok::End => Token::End,
            Tok::Comma => Token::Comma,
            Tok::OpenParen => Token::OpenParen,
            Tok::CloseParen => Token::CloseParen,
            Tok::Not => Token::Not,
            Tok::Equals => Token::Equals,
            Tok::DoubleEquals => Token::DoubleEquals,
            Tok::NotEquals => Token::NotEquals,
            Tok::GreaterThan => Token::GreaterThan,
            Tok::LessThan => Token::LessThan,
            Tok::In => Token::In,
            Tok::NotIn => Token::NotIn,
            Tok::Ident(s) => Token::Identifier(s.into()),
        }
    }
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    /// The current token and its byte offset.
    tok: Tok<'a>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        let mut p = Parser {
            input,
            pos: 0,
            tok: Tok::End,
            at: 0,
        };
        p.advance();
        p
    }

    /// Moves to the next token.
    fn advance(&mut self) {
        let b = self.input.as_bytes();
        while self.pos < b.len() && is_whitespace(b[self.pos]) {
            self.pos += 1;
        }
        self.at = self.pos;
        let Some(&c) = b.get(self.pos) else {
            self.tok = Tok::End;
            return;
        };
        let next_is_eq = b.get(self.pos + 1) == Some(&b'=');
        let (tok, len) = match c {
            b'=' if next_is_eq => (Tok::DoubleEquals, 2),
            b'!' if next_is_eq => (Tok::NotEquals, 2),
            b'=' => (Tok::Equals, 1),
            b'!' => (Tok::Not, 1),
            b'(' => (Tok::OpenParen, 1),
            b')' => (Tok::CloseParen, 1),
            b',' => (Tok::Comma, 1),
            b'>' => (Tok::GreaterThan, 1),
            b'<' => (Tok::LessThan, 1),
            _ => {
                let len = b[self.pos..]
                    .iter()
                    .position(|&c| is_special(c) || is_whitespace(c))
                    .unwrap_or(b.len() - self.pos);
                // Token boundaries are ASCII bytes, so this slice is on char boundaries.
                let word = &self.input[self.pos..self.pos + len];
                let tok = match word {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                };
                (tok, len)
            }
        };
        self.tok = tok;
        self.pos += len;
    }

    fn unexpected(&self, expected: Expected) -> SelectorError {
        SelectorError::Unexpected {
            position: self.at,
            found: self.tok.to_token(),
            expected,
        }
    }

    /// The current token as a key or value word (`in`/`notin` included), if it is one.
    fn word(&self) -> Option<&'a str> {
        match self.tok {
            Tok::Ident(s) => Some(s),
            t => t.word(),
        }
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        if self.tok != Tok::End {
            loop {
                reqs.push(self.requirement()?);
                match self.tok {
                    Tok::End => break,
                    Tok::Comma => self.advance(),
                    _ => return Err(self.unexpected(Expected::CommaOrEnd)),
                }
            }
        }
        reqs.sort_by(|a: &Requirement, b| a.key.cmp(&b.key));
        Ok(Selector { reqs: reqs.into() })
    }

    /// Parses one requirement starting at the current token; leaves the token after it.
    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let negated = self.tok == Tok::Not;
        if negated {
            self.advance();
        }
        let Some(key) = self.word() else {
            let expected = if negated {
                Expected::Key
            } else {
                Expected::Requirement
            };
            return Err(self.unexpected(expected));
        };
        validate_key(key).map_err(|problem| SelectorError::InvalidKey {
            position: self.at,
            problem,
        })?;
        self.advance();
        let unary = |op| Requirement {
            key: key.into(),
            op,
            values: Box::new([]),
            bound: 0,
        };
        if negated {
            return Ok(unary(Operator::DoesNotExist));
        }
        let op = match self.tok {
            Tok::End | Tok::Comma => return Ok(unary(Operator::Exists)),
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::NotEquals => Operator::NotEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::In => Operator::In,
            Tok::NotIn => Operator::NotIn,
            _ => return Err(self.unexpected(Expected::Operator)),
        };
        self.advance();
        let mut values: Vec<Box<str>> = Vec::with_capacity(1);
        let mut bound = 0;
        if matches!(op, Operator::In | Operator::NotIn) {
            if self.tok != Tok::OpenParen {
                return Err(self.unexpected(Expected::OpenParen));
            }
            self.advance();
            // `slot (',' slot)* ')'` where an empty slot is the empty value: `()` is `("")`.
            loop {
                match self.word() {
                    Some(v) => {
                        values.push(self.value(v)?);
                        self.advance();
                    }
                    None if matches!(self.tok, Tok::Comma | Tok::CloseParen) => {
                        values.push("".into());
                    }
                    None => return Err(self.unexpected(Expected::ListItem)),
                }
                match self.tok {
                    Tok::Comma => self.advance(),
                    Tok::CloseParen => {
                        self.advance();
                        break;
                    }
                    _ => return Err(self.unexpected(Expected::CommaOrCloseParen)),
                }
            }
        } else {
            // A missing value (`x=` before `,` or the end) is the empty value.
            let (v, position) = match self.word() {
                Some(v) => {
                    let at = self.at;
                    let v = self.value(v)?;
                    self.advance();
                    (v, at)
                }
                None if matches!(self.tok, Tok::Comma | Tok::End) => ("".into(), self.at),
                None => return Err(self.unexpected(Expected::Value)),
            };
            if matches!(op, Operator::GreaterThan | Operator::LessThan) {
                bound = v
                    .parse::<i64>()
                    .map_err(|_| SelectorError::NotAnInteger { position })?;
            }
            values.push(v);
        }
        values.sort_unstable();
        values.dedup();
        Ok(Requirement {
            key: key.into(),
            op,
            values: values.into(),
            bound,
        })
    }

    /// Validates `v` (the current token) as a label value.
    fn value(&self, v: &str) -> Result<Box<str>, SelectorError> {
        validate_value(v).map_err(|problem| SelectorError::InvalidValue {
            position: self.at,
            problem,
        })?;
        Ok(v.to_owned().into_boxed_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `same_labels` of decoded objects: true exactly when the label maps are equal (whatever
    /// order the JSON gave them in, and whatever else changed), so a label index that trusts
    /// it never misses a moved label.
    #[test]
    fn decoded_objects_tell_same_labels_at_once() {
        let obj = |labels: &str, data: &str| -> DynamicObject {
            serde_json::from_str(&alloc::format!(
                r#"{{"metadata":{{"name":"a","namespace":"n","labels":{labels}}},"data":{data}}}"#
            ))
            .unwrap()
        };
        let base = obj(r#"{"app":"web","tier":"db"}"#, r#"{"k":"1"}"#);
        let reordered = obj(r#"{"tier":"db","app":"web"}"#, r#"{"k":"2"}"#);
        let moved = obj(r#"{"app":"api","tier":"db"}"#, r#"{"k":"1"}"#);
        let fewer = obj(r#"{"app":"web"}"#, r#"{"k":"1"}"#);
        let none = obj("{}", r#"{"k":"1"}"#);
        assert!(base.same_labels(&reordered));
        assert!(!base.same_labels(&moved));
        assert!(!base.same_labels(&fewer));
        assert!(!base.same_labels(&none) && none.same_labels(&none.clone()));
        let index = crate::cache::indexer::LabelIndex::new("app");
        use crate::cache::indexer::IndexFunc;
        assert!(index.same_values(&base, &reordered));
        assert!(!index.same_values(&base, &moved));
        // Another label changed: not the same labels, but the same value for this index.
        assert!(index.same_values(&base, &fewer));
        assert!(!index.same_values(&base, &none));
        assert!(!BTreeMap::<String, String>::new().same_labels(&BTreeMap::new()));
    }

    #[test]
    fn lexer_takes_the_longest_operator() {
        let toks = |s: &'static str| {
            let mut p = Parser::new(s);
            let mut out = Vec::new();
            while p.tok != Tok::End {
                out.push((p.at, p.tok));
                p.advance();
            }
            out
        };
        assert_eq!(
            toks("== != (), = notin"),
            [
                (0, Tok::DoubleEquals),
                (3, Tok::NotEquals),
                (6, Tok::OpenParen),
                (7, Tok::CloseParen),
                (8, Tok::Comma),
                (10, Tok::Equals),
                (12, Tok::NotIn)
            ]
        );
        assert_eq!(
            toks("!==<=>"),
            [
                (0, Tok::NotEquals),
                (2, Tok::Equals),
                (3, Tok::LessThan),
                (4, Tok::Equals),
                (5, Tok::GreaterThan)
            ]
        );
        assert_eq!(
            toks("||~ é"),
            [(0, Tok::Ident("||~")), (4, Tok::Ident("é"))]
        );
    }
}
