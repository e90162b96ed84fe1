//! CityHash64 version 1.0 (Geoff Pike and Jyrki Alakuijala, 2011), the hash CatBoost keeps its
//! category strings as: a categorical value is `CityHash64(utf8 bytes) & 0xffffffff`
//! (`CalcCatFeatureHash`), and a one-hot split compares that hash. Written from the published
//! algorithm; the unit tests check it against hashes CatBoost itself wrote into model files.

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;
const K3: u64 = 0xc949_d7c7_509e_6557;

/// CatBoost's hash of a category value: the low 32 bits of CityHash64 of its UTF-8 bytes.
pub fn catboost_category_hash(value: &str) -> u32 {
    city_hash64(value.as_bytes()) as u32
}

fn load64(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"))
}

fn load32(s: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes")) as u64
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// Hash128to64 of the pair (low `u`, high `v`).
fn hash_len16(u: u64, v: u64) -> u64 {
    const MUL: u64 = 0x9ddf_ea08_eb38_2d69;
    let mut a = (u ^ v).wrapping_mul(MUL);
    a ^= a >> 47;
    let mut b = (v ^ a).wrapping_mul(MUL);
    b ^= b >> 47;
    b.wrapping_mul(MUL)
}

fn hash_len0to16(s: &[u8]) -> u64 {
    let len = s.len();
    if len > 8 {
        let a = load64(s, 0);
        let b = load64(s, len - 8);
        return hash_len16(a, b.wrapping_add(len as u64).rotate_right(len as u32)) ^ b;
    }
    if len >= 4 {
        let a = load32(s, 0);
        return hash_len16((len as u64).wrapping_add(a << 3), load32(s, len - 4));
    }
    if len > 0 {
        let (a, b, c) = (s[0] as u32, s[len >> 1] as u32, s[len - 1] as u32);
        let y = a.wrapping_add(b << 8);
        let z = (len as u32).wrapping_add(c << 2);
        return shift_mix((y as u64).wrapping_mul(K2) ^ (z as u64).wrapping_mul(K3)).wrapping_mul(K2);
    }
    K2
}

fn hash_len17to32(s: &[u8]) -> u64 {
    let len = s.len();
    let a = load64(s, 0).wrapping_mul(K1);
    let b = load64(s, 8);
    let c = load64(s, len - 8).wrapping_mul(K2);
    let d = load64(s, len - 16).wrapping_mul(K0);
    hash_len16(
        a.wrapping_sub(b).rotate_right(43).wrapping_add(c.rotate_right(30)).wrapping_add(d),
        a.wrapping_add((b ^ K3).rotate_right(20)).wrapping_sub(c).wrapping_add(len as u64),
    )
}

fn weak_hash_len32_with_seeds(s: &[u8], at: usize, mut a: u64, mut b: u64) -> (u64, u64) {
    let (w, x, y, z) = (load64(s, at), load64(s, at + 8), load64(s, at + 16), load64(s, at + 24));
    a = a.wrapping_add(w);
    b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
    let c = a;
    a = a.wrapping_add(x).wrapping_add(y);
    b = b.wrapping_add(a.rotate_right(44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

fn hash_len33to64(s: &[u8]) -> u64 {
    let len = s.len();
    let mut z = load64(s, 24);
    let mut a = load64(s, 0).wrapping_add((len as u64).wrapping_add(load64(s, len - 16)).wrapping_mul(K0));
    let mut b = a.wrapping_add(z).rotate_right(52);
    let mut c = a.rotate_right(37);
    a = a.wrapping_add(load64(s, 8));
    c = c.wrapping_add(a.rotate_right(7));
    a = a.wrapping_add(load64(s, 16));
    let vf = a.wrapping_add(z);
    let vs = b.wrapping_add(a.rotate_right(31)).wrapping_add(c);
    a = load64(s, 16).wrapping_add(load64(s, len - 32));
    z = load64(s, len - 8);
    b = a.wrapping_add(z).rotate_right(52);
    c = a.rotate_right(37);
    a = a.wrapping_add(load64(s, len - 24));
    c = c.wrapping_add(a.rotate_right(7));
    a = a.wrapping_add(load64(s, len - 16));
    let wf = a.wrapping_add(z);
    let ws = b.wrapping_add(a.rotate_right(31)).wrapping_add(c);
    let r = shift_mix(vf.wrapping_add(ws).wrapping_mul(K2).wrapping_add(wf.wrapping_add(vs).wrapping_mul(K0)));
    shift_mix(r.wrapping_mul(K0).wrapping_add(vs)).wrapping_mul(K2)
}

/// CityHash64 v1.0 of `s`.
pub fn city_hash64(s: &[u8]) -> u64 {
    let len = s.len();
    if len <= 16 {
        return hash_len0to16(s);
    }
    if len <= 32 {
        return hash_len17to32(s);
    }
    if len <= 64 {
        return hash_len33to64(s);
    }
    // Longer strings: the end first, then 64-byte chunks, keeping 56 bytes of state.
    let mut x = load64(s, 0);
    let mut y = load64(s, len - 16) ^ K1;
    let mut z = load64(s, len - 56) ^ K0;
    let mut v = weak_hash_len32_with_seeds(s, len - 64, len as u64, y);
    let mut w = weak_hash_len32_with_seeds(s, len - 32, (len as u64).wrapping_mul(K1), K0);
    z = z.wrapping_add(shift_mix(v.1).wrapping_mul(K1));
    x = z.wrapping_add(x).rotate_right(39).wrapping_mul(K1);
    y = y.rotate_right(33).wrapping_mul(K1);
    let mut at = 0;
    let mut left = (len - 1) & !63;
    loop {
        x = x.wrapping_add(y).wrapping_add(v.0).wrapping_add(load64(s, at + 16)).rotate_right(37).wrapping_mul(K1);
        y = y.wrapping_add(v.1).wrapping_add(load64(s, at + 48)).rotate_right(42).wrapping_mul(K1);
        x ^= w.1;
        y ^= v.0;
        z = (z ^ w.0).rotate_right(33);
        v = weak_hash_len32_with_seeds(s, at, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
        w = weak_hash_len32_with_seeds(s, at + 32, z.wrapping_add(w.1), y);
        std::mem::swap(&mut z, &mut x);
        at += 64;
        left -= 64;
        if left == 0 {
            break;
        }
    }
    hash_len16(hash_len16(v.0, w.0).wrapping_add(shift_mix(y).wrapping_mul(K1)).wrapping_add(z), hash_len16(v.1, w.1).wrapping_add(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes CatBoost 1.2.10 wrote into the one-hot `values` of models trained on these
    /// strings (as unsigned 32-bit numbers; the files hold them signed): every length class.
    #[test]
    fn matches_the_hashes_catboost_writes() {
        let short = ["a", "bb", "ccc", "dddd", "eeeee", "ffffffffff", "0", "17"];
        let expected = [3489901818u32, 2242683362, 2897599157, 2024015699, 3094957406, 2600412233, 2856682258, 3854130209];
        for (s, want) in short.iter().zip(expected) {
            assert_eq!(catboost_category_hash(s), want, "{s:?}");
        }
        let long = [
            "a".to_string(),
            "twenty-characters-xx".to_string(),
            "a string of exactly forty characters....".to_string(),
            "x".repeat(100),
            "é ü 中文".to_string(),
            "seventeen chars!!".to_string(),
            "thirty-three characters long here".to_string(),
            "y".repeat(64),
            "z".repeat(65),
            "w".repeat(128),
        ];
        let mut got: Vec<u32> = long.iter().map(|s| catboost_category_hash(s)).collect();
        got.sort_unstable();
        let want = [133387744, 1213635094, 1588322760, 1972452671, 3045890605, 3323495555, 3335020994, 3489901818, 4169559093, 4210183237];
        assert_eq!(got, want);
    }
}
