//! A decoder for Universal Binary JSON (the `.ubj` format XGBoost writes), into
//! `serde_json::Value` so the XGBoost reader handles JSON and UBJSON with one code path.
//!
//! Supports the draft-12 value markers XGBoost emits, including optimized containers
//! (`$` type + `#` count), which XGBoost uses for its large numeric arrays. Big-endian numbers.

use serde_json::{Map, Number, Value};

/// Decodes one UBJSON value from the start of `bytes`. Errors carry the byte offset.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut r = Reader { bytes, pos: 0 };
    let v = r.value()?;
    Ok(v)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
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
        self.bytes
            .get(self.pos)
            .copied()
            .ok_or_else(|| format!("unexpected end of data at byte {} (the file looks truncated)", self.pos))
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
        let marker = self.byte()?;
        self.value_of(marker)
    }

    fn float(v: f64) -> Value {
        // JSON has no NaN/Inf: they become null, which the model reader reports by field name.
        Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null)
    }

    fn value_of(&mut self, marker: u8) -> Result<Value, String> {
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
            b'N' => self.value()?,
            m => return Err(format!("unknown UBJSON marker {:?} (0x{m:02x}) at byte {}", m as char, self.pos - 1)),
        })
    }

    fn container(&mut self, object: bool) -> Result<Value, String> {
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
        let next = |r: &mut Self| match elem_type {
            Some(t) => r.value_of(t),
            None => r.value(),
        };
        if object {
            let mut map = Map::new();
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
    fn truncated_input_is_an_error_with_offset() {
        let b = vec![b'{', b'i', 1, b'a', b'[', b'$', b'd', b'#', b'i', 2, 0, 0];
        let e = decode(&b).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
    }
}
