//! HotSpot's UNSIGNED5 numbers (`utilities/unsigned5.hpp`), as in line number tables and debug
//! info: up to 5 bytes of 6-bit digits past the first, a byte below `L + bias` ending the number.
//! The byte bias is 0 before JDK 20 and 1 since (JDK-8292758), when zero bytes were excluded.

/// Reads one number at `*at`, advancing it; `None` if the bytes end first or a byte is below the
/// bias (not a digit of this encoding).
pub fn read(bytes: &[u8], at: &mut usize, bias: u8) -> Option<u32> {
    let x = u32::from(bias);
    let low_limit = 192 + x;
    let mut value: u64 = 0;
    for i in 0..5 {
        let b = u32::from(*bytes.get(*at)?);
        *at += 1;
        value += u64::from(b.checked_sub(x)?) << (6 * i);
        if b < low_limit {
            break;
        }
    }
    u32::try_from(value).ok()
}

/// Reads one zig-zag encoded signed number.
pub fn read_signed(bytes: &[u8], at: &mut usize, bias: u8) -> Option<i64> {
    let v = read(bytes, at, bias)?;
    Some(i64::from((v >> 1) as i32 ^ -((v & 1) as i32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_and_several_byte_numbers_with_both_biases() {
        let mut at = 0;
        assert_eq!(read(&[5], &mut at, 0), Some(5));
        // 200 continues: 200 + (3 << 6) = 392.
        let mut at = 0;
        assert_eq!(read(&[200, 3], &mut at, 0), Some(392));
        assert_eq!(at, 2);
        // JDK 20+: every byte is one more, and a 0 byte is no digit.
        let mut at = 0;
        assert_eq!(read(&[201, 4], &mut at, 1), Some(392));
        assert_eq!(read(&[0], &mut 0, 1), None);
        assert_eq!(read(&[250], &mut 0, 0), None, "ends in the middle");
        assert_eq!(read_signed(&[5], &mut 0, 0), Some(-3));
        assert_eq!(read_signed(&[20], &mut 0, 0), Some(10));
    }
}
