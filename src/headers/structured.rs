//! RFC 9651 structured fields: the list parser behind `RateLimit` and `RateLimit-Policy`.

use http::HeaderMap;

use super::values::digits;

/// A parameter value: `Some` for a non-negative integer, `None` for any other kind of value.
type ParamValue = Option<u64>;

/// The parameters of one list member, as keys and values.
pub(crate) struct Params<'a>(Vec<(&'a [u8], ParamValue)>);

impl Params<'_> {
    /// The value of parameter `key` (the last one when it is repeated): `Some(None)` when it
    /// is there but not a non-negative integer.
    pub(crate) fn get(&self, key: &[u8]) -> Option<ParamValue> {
        self.0.iter().rev().find(|(k, _)| *k == key).map(|p| p.1)
    }
}

/// The members of the list field `name`, its lines combined into one list, each read by
/// `read`: `None` when the list is malformed or `read` is `None` for a member.
pub(crate) fn read_list<T>(
    headers: &HeaderMap,
    name: &str,
    read: impl Fn(&Params<'_>) -> Option<T>,
) -> Option<Vec<T>> {
    let mut list = Vec::new();
    for line in headers.get_all(name) {
        if !list.is_empty() {
            list.extend_from_slice(b", ");
        }
        list.extend_from_slice(line.as_bytes());
    }
    Parser(&list).list()?.iter().map(read).collect()
}

/// A number read by [`Parser::number`]: an integer (`None` when negative), or a decimal.
enum Number {
    Integer(ParamValue),
    Decimal,
}

/// The value of a lowercase hexadecimal digit.
fn lower_hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Just enough of an RFC 9651 structured field parser for a list of items whose parameters
/// carry integers. Every bare item type is read (integers, decimals, strings, tokens, byte
/// sequences, booleans, dates and display strings), so a parameter this crate does not know,
/// whatever its type, is skipped rather than making the field malformed. Every method returns
/// `None` on a syntax error.
struct Parser<'a>(&'a [u8]);

impl<'a> Parser<'a> {
    /// A list, each member reduced to its parameters.
    fn list(mut self) -> Option<Vec<Params<'a>>> {
        self.take_while(|b| b == b' ');
        let mut members = Vec::new();
        while !self.0.is_empty() {
            self.bare_item()?;
            members.push(self.parameters()?);
            self.take_while(|b| b == b' ' || b == b'\t');
            if self.0.is_empty() {
                break;
            }
            self.eat(b',')?;
            self.take_while(|b| b == b' ' || b == b'\t');
            if self.0.is_empty() {
                return None;
            }
        }
        Some(members)
    }

    fn parameters(&mut self) -> Option<Params<'a>> {
        let mut params = Params(Vec::new());
        while self.eat(b';').is_some() {
            self.take_while(|b| b == b' ');
            if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
                return None;
            }
            let key = self
                .take_while(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'));
            let value = match self.eat(b'=') {
                Some(()) => self.bare_item()?,
                None => None, // boolean true
            };
            params.0.push((key, value));
        }
        Some(params)
    }

    fn bare_item(&mut self) -> Option<ParamValue> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => match self.number()? {
                Number::Integer(value) => Some(value),
                Number::Decimal => Some(None),
            },
            b'"' => {
                self.bump();
                self.string()?;
                Some(None)
            }
            b'*' | b'A'..=b'Z' | b'a'..=b'z' => {
                self.take_while(|b| is_tchar(b) || b == b':' || b == b'/');
                Some(None)
            }
            b':' => {
                self.bump();
                self.take_while(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
                self.eat(b':')?;
                Some(None)
            }
            b'?' => {
                self.bump();
                self.bump().filter(|b| matches!(b, b'0' | b'1'))?;
                Some(None)
            }
            b'@' => {
                // A date: an integer number of seconds since the epoch (RFC 9651 §3.3.7).
                self.bump();
                matches!(self.number()?, Number::Integer(_)).then_some(None)
            }
            b'%' => {
                self.bump();
                self.eat(b'"')?;
                self.display_string()?;
                Some(None)
            }
            _ => None,
        }
    }

    /// The rest of a string, after its opening quote.
    fn string(&mut self) -> Option<()> {
        loop {
            match self.bump()? {
                b'"' => return Some(()),
                b'\\' => {
                    self.bump().filter(|b| matches!(b, b'"' | b'\\'))?;
                }
                b' '..=b'~' => {}
                _ => return None,
            }
        }
    }

    /// The rest of a display string, after `%"`: visible ASCII and `%xx` escapes (lowercase
    /// hex) that decode to UTF-8 (RFC 9651 §3.3.8).
    fn display_string(&mut self) -> Option<()> {
        let mut bytes = Vec::new();
        loop {
            match self.bump()? {
                b'"' => return std::str::from_utf8(&bytes).is_ok().then_some(()),
                b'%' => {
                    let hi = self.bump().and_then(lower_hex)?;
                    let lo = self.bump().and_then(lower_hex)?;
                    bytes.push(hi << 4 | lo);
                }
                b @ b' '..=b'~' => bytes.push(b),
                _ => return None,
            }
        }
    }

    /// An integer (at most 15 digits) or a decimal (at most 12 digits, then 1 to 3).
    fn number(&mut self) -> Option<Number> {
        let negative = self.eat(b'-').is_some();
        let int = self.take_while(|b| b.is_ascii_digit());
        if int.is_empty() {
            return None;
        }
        if self.eat(b'.').is_some() {
            let frac = self.take_while(|b| b.is_ascii_digit());
            return (int.len() <= 12 && (1..=3).contains(&frac.len())).then_some(Number::Decimal);
        }
        if int.len() > 15 {
            return None;
        }
        let value = digits(int)?; // at most 15 digits: never `None`
        Some(Number::Integer((!negative || value == 0).then_some(value)))
    }

    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    fn eat(&mut self, expected: u8) -> Option<()> {
        (self.peek()? == expected).then(|| self.0 = &self.0[1..])
    }

    fn take_while(&mut self, pred: impl Fn(u8) -> bool) -> &'a [u8] {
        let len = self.0.iter().take_while(|&&b| pred(b)).count();
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }
}

/// Whether `b` may appear in an HTTP token (RFC 9110 §5.6.2).
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn structured_fields_never_panic(value in "[ -~]{0,64}") {
            let _ = Parser(value.as_bytes()).list();
        }
    }
}
