//! A decoder for Universal Binary JSON (the `.ubj` format XGBoost writes), into
//! `serde_json::Value` so the XGBoost reader handles JSON and UBJSON with one code path.
//!
//! Supports the draft-12 value markers XGBoost emits, including optimized containers
//! (`$` type + `#` count), which XGBoost uses for its large numeric arrays. Big-endian numbers.
//!
//! Nothing in the input decides how much is allocated or how deep the decoder recurses: every
//! count is checked against the bytes left, the number of values decoded is bounded by the input's
//! length (a typed container of zero-byte elements such as `[$Z#L…` would otherwise make an
//! 8-byte header stand for billions of values), containers nest at most [`MAX_DEPTH`] deep (the
//! JSON reader's limit), and no-op markers are skipped in a loop, not by recursion.

use serde_json::{Map, Number, Value};

/// Deepest nesting of containers accepted (serde_json's own recursion limit for JSON models).
pub const MAX_DEPTH: usize = 128;

/// Decodes one UBJSON value from the start of `bytes`. Errors carry the byte offset.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    // One value per input byte, plus one: every value but a typed container's zero-byte
    // elements consumes a byte, and those are charged against the same budget.
    let mut r = Reader { bytes, pos: 0, depth: 0, values_left: bytes.len() + 1 };
    let v = r.value()?;
    Ok(v)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Containers open around the current position.
    depth: usize,
    /// Values that may still be decoded (see [`decode`]).
    values_left: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.pos + n > self.bytes.len() {
            return Err(format!(
                "unexpected end of data at byte {} (needed {} more bytes; the file looks truncated)",
                self.pos,
                self.pos + n - self.bytes.len()
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn peek(&self) -> Result<u8, String> {
        self.bytes.get(self.pos).copied().ok_or_else(|| format!("unexpected end of data at byte {} (the file looks truncated)", self.pos))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// An integer given by its marker (used for lengths and counts).
    fn int_of(&mut self, marker: u8) -> Result<i64, String> {
        Ok(match marker {
            b'i' => i8::from_be_bytes(self.array()?) as i64,
            b'U' => u8::from_be_bytes(self.array()?) as i64,
            b'I' => i16::from_be_bytes(self.array()?) as i64,
            b'l' => i32::from_be_bytes(self.array()?) as i64,
            b'L' => i64::from_be_bytes(self.array()?),
            m => return Err(format!("expected an integer marker at byte {}, found {:?}", self.pos - 1, m as char)),
        })
    }

    fn length(&mut self) -> Result<usize, String> {
        let at = self.pos;
        let marker = self.byte()?;
        let n = self.int_of(marker)?;
        if n < 0 || n as usize > self.bytes.len() {
            return Err(format!("invalid length {n} at byte {at}"));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.length()?;
        let at = self.pos;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| format!("string at byte {at} is not UTF-8"))
    }

    fn value(&mut self) -> Result<Value, String> {
        let mut marker = self.byte()?;
        // `N` is a no-op before a value; a run of them is skipped here rather than by recursion.
        while marker == b'N' {
            marker = self.byte()?;
        }
        self.value_of(marker)
    }

    /// Charges one decoded value against the budget.
    fn count_value(&mut self) -> Result<(), String> {
        self.values_left = self.values_left.checked_sub(1).ok_or_else(|| {
            format!("more values than a {}-byte file can hold (at byte {}): a container's count is corrupt", self.bytes.len(), self.pos)
        })?;
        Ok(())
    }

    fn float(v: f64) -> Value {
        // JSON numbers have no NaN or infinities: they become the strings XGBoost's own JSON
        // writes for them (`NaN`, `Infinity`, `-Infinity`), which the model reader takes.
        Number::from_f64(v).map(Value::Number).unwrap_or_else(|| Value::String(super::xgboost::non_finite_name(v).into()))
    }

    fn value_of(&mut self, marker: u8) -> Result<Value, String> {
        self.count_value()?;
        Ok(match marker {
            b'Z' => Value::Null,
            b'T' => Value::Bool(true),
            b'F' => Value::Bool(false),
            b'i' | b'U' | b'I' | b'l' | b'L' => Value::Number(self.int_of(marker)?.into()),
            b'd' => Self::float(f32::from_be_bytes(self.array()?) as f64),
            b'D' => Self::float(f64::from_be_bytes(self.array()?)),
            b'C' => Value::String((self.byte()? as char).to_string()),
            b'S' | b'H' => Value::String(self.string()?),
            b'[' => self.container(false)?,
            b'{' => self.container(true)?,
            // A typed container of `N` would be values of no type at all.
            b'N' => return Err(format!("no-op marker 'N' used as a container's element type at byte {}", self.pos)),
            m => return Err(format!("unknown UBJSON marker {:?} (0x{m:02x}) at byte {}", m as char, self.pos - 1)),
        })
    }

    fn container(&mut self, object: bool) -> Result<Value, String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!("containers nested more than {MAX_DEPTH} deep at byte {}", self.pos - 1));
        }
        self.depth += 1;
        let result = self.container_body(object);
        self.depth -= 1;
        result
    }

    fn container_body(&mut self, object: bool) -> Result<Value, String> {
        let mut elem_type = None;
        let mut count = None;
        if self.peek()? == b'$' {
            self.pos += 1;
            elem_type = Some(self.byte()?);
            if self.byte()? != b'#' {
                return Err(format!("typed container without a count at byte {}", self.pos - 1));
            }
            count = Some(self.length()?);
        } else if self.peek()? == b'#' {
            self.pos += 1;
            count = Some(self.length()?);
        }
        if let Some(n) = count {
            // Each element takes at least its own bytes (one for an untyped value or a key's
            // length marker); zero-byte elements are bounded by the value budget instead.
            let min_size = match elem_type {
                Some(b'Z' | b'T' | b'F') if !object => 0,
                Some(b'd' | b'l') => 4,
                Some(b'D' | b'L') => 8,
                Some(b'I') => 2,
                _ => 1,
            };
            let left = self.bytes.len() - self.pos;
            if n.checked_mul(min_size).is_none_or(|need| need > left) {
                return Err(format!(
                    "container at byte {} declares {n} elements, more than the {left} bytes left can hold (the file looks truncated or corrupt)",
                    self.pos
                ));
            }
            if min_size == 0 && n > self.values_left {
                return Err(format!(
                    "more values than a {}-byte file can hold (container at byte {} declares {n} more): a count is corrupt",
                    self.bytes.len(),
                    self.pos
                ));
            }
        }
        let next = |r: &mut Self| match elem_type {
            Some(t) => r.value_of(t),
            None => r.value(),
        };
        if object {
            let mut map = Map::new();
            // Keys are strings of at least two bytes, so a count checked above bounds them too.
            match count {
                Some(n) => {
                    for _ in 0..n {
                        let k = self.string()?;
                        let v = next(self)?;
                        map.insert(k, v);
                    }
                }
                None => loop {
                    if self.peek()? == b'}' {
                        self.pos += 1;
                        break;
                    }
                    let k = self.string()?;
                    let v = self.value()?;
                    map.insert(k, v);
                },
            }
            Ok(Value::Object(map))
        } else {
            let mut items = Vec::with_capacity(count.unwrap_or(0).min(1 << 20));
            match count {
                Some(n) => {
                    for _ in 0..n {
                        items.push(next(self)?);
                    }
                }
                None => loop {
                    if self.peek()? == b']' {
                        self.pos += 1;
                        break;
                    }
                    items.push(self.value()?);
                },
            }
            Ok(Value::Array(items))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_objects_and_typed_arrays() {
        // {"a": [$d#i2 1.5 -2.0], "b": "hi", "c": T}
        let mut b = vec![b'{', b'i', 1, b'a', b'[', b'$', b'd', b'#', b'i', 2];
        b.extend(1.5f32.to_be_bytes());
        b.extend((-2.0f32).to_be_bytes());
        b.extend([b'i', 1, b'b', b'S', b'i', 2, b'h', b'i', b'i', 1, b'c', b'T', b'}']);
        let v = decode(&b).unwrap();
        assert_eq!(v, serde_json::json!({"a": [1.5, -2.0], "b": "hi", "c": true}));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let b = vec![b'['; 1 << 20];
        let e = decode(&b).unwrap_err();
        assert!(e.contains("nested more than 128"), "{e}");
        // A run of no-op markers is skipped without recursion.
        let mut b = vec![b'N'; 1 << 20];
        b.push(b'T');
        assert_eq!(decode(&b).unwrap(), Value::Bool(true));
    }

    #[test]
    fn counts_are_bounded_by_the_input() {
        // [$Z#L 2^40: eleven bytes declaring a trillion nulls.
        let mut b = vec![b'[', b'$', b'Z', b'#', b'L'];
        b.extend((1u64 << 40).to_be_bytes());
        let e = decode(&b).unwrap_err();
        assert!(e.contains("invalid length 1099511627776"), "{e}");
        // [$Z#i 100 in a 6-byte file.
        let e = decode(&[b'[', b'$', b'Z', b'#', b'i', 100]).unwrap_err();
        assert!(e.contains("invalid length 100"), "{e}");
        // Nested zero-byte arrays: each inner array's count is charged to the same budget.
        let mut b = vec![b'[', b'$', b'[', b'#', b'I', 0x0f, 0xff];
        for _ in 0..0x0fff {
            b.extend([b'$', b'Z', b'#', b'I', 0x01, 0x00]);
        }
        let e = decode(&b).unwrap_err();
        assert!(e.contains("more values than"), "{e}");
        // f32 elements need four bytes each.
        let b = vec![b'[', b'$', b'd', b'#', b'i', 3, 0, 0, 0, 0];
        assert!(decode(&b).unwrap_err().contains("declares 3 elements"));
        // A legitimate typed array of booleans still decodes.
        let b = vec![b'[', b'$', b'T', b'#', b'i', 3];
        assert_eq!(decode(&b).unwrap(), serde_json::json!([true, true, true]));
    }

    #[test]
    fn truncated_input_is_an_error_with_offset() {
        let b = vec![b'{', b'i', 1, b'a', b'[', b'$', b'd', b'#', b'i', 2, 0, 0];
        let e = decode(&b).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
    }
}
