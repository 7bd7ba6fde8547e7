//! Kubernetes resource quantities ("100m", "2Gi", "1.5", "1e3") parsed into exact integer milli-units.
//!
//! Scheduling arithmetic must be exact and cheap, so every quantity becomes an `i64` count of thousandths of the
//! base unit (millicores for cpu, milli-bytes for memory). An i64 of milli-units holds up to about 9.2e15 base
//! units, which covers any real node (8 PiB of memory); larger values are rejected rather than wrapped.

use std::fmt;

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantity {input:?} {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

fn err(input: &str, reason: &'static str) -> QuantityError {
    QuantityError {
        input: input.to_string(),
        reason,
    }
}

/// Parses a Kubernetes quantity into milli-units of its base unit, rounding fractions of a milli-unit up (as the
/// API server rounds requests up to the nearest milli).
pub fn parse_milli(input: &str) -> Result<i64, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(err(input, "is empty"));
    }
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    if number.is_empty() || number == "." {
        return Err(err(input, "has no number"));
    }
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if frac_part.contains('.') {
        return Err(err(input, "has more than one decimal point"));
    }
    // Scale as (multiplier numerator, power of ten) so binary and decimal suffixes stay exact.
    let (binary_mult, dec_exp): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        other if other.starts_with(['e', 'E']) => {
            let exp: i32 = other[1..]
                .parse()
                .map_err(|_| err(input, "has an invalid exponent"))?;
            if !(-30..=30).contains(&exp) {
                return Err(err(input, "has an exponent out of range"));
            }
            (1, exp)
        }
        _ => return Err(err(input, "has an unknown suffix")),
    };
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 30 {
        return Err(err(input, "has too many digits"));
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err(input, "is not a number"))?
    };
    // value = mantissa * 10^(dec_exp - frac_len) * binary_mult, in base units; we want milli-units.
    let exp10 = dec_exp - i32::try_from(frac_part.len()).map_err(|_| err(input, "is too long"))? + 3;
    let scaled = mantissa
        .checked_mul(binary_mult)
        .ok_or_else(|| err(input, "is too large"))?;
    let milli = if exp10 >= 0 {
        let factor = 10i128
            .checked_pow(exp10.unsigned_abs())
            .ok_or_else(|| err(input, "is too large"))?;
        scaled
            .checked_mul(factor)
            .ok_or_else(|| err(input, "is too large"))?
    } else {
        let divisor = 10i128.checked_pow(exp10.unsigned_abs()).unwrap_or(i128::MAX);
        // Round up: a request of 0.5m is one milli, as the API server does.
        (scaled + divisor - 1) / divisor
    };
    let milli = if negative { -milli } else { milli };
    i64::try_from(milli).map_err(|_| err(input, "is too large"))
}

/// Parses a quantity into whole base units, rounding up (for example "1500m" pods is 2).
pub fn parse_units_ceil(input: &str) -> Result<i64, QuantityError> {
    let milli = parse_milli(input)?;
    Ok(milli.div_euclid(1000) + i64::from(milli.rem_euclid(1000) != 0))
}

/// A milli-unit amount printed as Kubernetes would print it for a resource of the given name: cpu in cores or
/// millicores, byte-like resources in the largest exact binary suffix, counts as integers.
pub struct FormatMilli<'a> {
    pub resource: &'a str,
    pub milli: i64,
}

impl fmt::Display for FormatMilli<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.milli;
        if m % 1000 != 0 {
            return write!(f, "{m}m");
        }
        let units = m / 1000;
        let bytes_like = matches!(self.resource, "memory" | "ephemeral-storage" | "storage")
            || self.resource.starts_with("hugepages-");
        if bytes_like && units != 0 {
            for (suffix, shift) in [
                ("Ei", 60),
                ("Pi", 50),
                ("Ti", 40),
                ("Gi", 30),
                ("Mi", 20),
                ("Ki", 10),
            ] {
                let unit = 1i64 << shift;
                if units % unit == 0 {
                    return write!(f, "{}{suffix}", units / unit);
                }
            }
        }
        write!(f, "{units}")
    }
}

/// Convenience: format milli-units for a resource name.
pub fn format_milli(resource: &str, milli: i64) -> String {
    FormatMilli { resource, milli }.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_binary_and_exponent_forms() {
        assert_eq!(parse_milli("100m").unwrap(), 100);
        assert_eq!(parse_milli("2").unwrap(), 2000);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("2Gi").unwrap(), 2 * (1 << 30) * 1000);
        assert_eq!(parse_milli("1k").unwrap(), 1_000_000);
        assert_eq!(parse_milli("1e3").unwrap(), 1_000_000);
        assert_eq!(parse_milli("0.5Gi").unwrap(), (1i64 << 29) * 1000);
        assert_eq!(parse_milli("-1").unwrap(), -1000);
        assert_eq!(
            parse_milli("1n").unwrap(),
            1,
            "sub-milli amounts round up to one milli"
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_milli("").is_err());
        assert!(parse_milli("abc").is_err());
        assert!(parse_milli("1.2.3").is_err());
        assert!(parse_milli("5Xi").is_err());
        assert!(parse_milli("99999999999999999999Ei").is_err());
    }

    #[test]
    fn formats_like_kubernetes() {
        assert_eq!(format_milli("cpu", 1500), "1500m");
        assert_eq!(format_milli("cpu", 2000), "2");
        assert_eq!(format_milli("memory", 1024 * 1024 * 1000), "1Mi");
        assert_eq!(format_milli("pods", 110_000), "110");
        assert_eq!(parse_units_ceil("1500m").unwrap(), 2);
    }
}
