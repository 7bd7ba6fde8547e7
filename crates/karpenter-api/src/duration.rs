//! Go-style durations ("720h", "1h30m", "90s", "1.5h") and the NodePool's nillable form that also accepts
//! "Never". Karpenter's manifests use Go's `time.ParseDuration` syntax, so we parse that syntax exactly and keep
//! the text the user wrote, so an object round-trips unchanged.

use std::{borrow::Cow, fmt, time::Duration};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

use crate::validation::{DURATION_PATTERN, NILLABLE_DURATION_PATTERN};

/// Why a duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Parses Go's duration syntax: a sequence of decimal numbers with units ns, us, µs, ms, s, m, h; an optional
/// sign; "0" alone. Negative durations are rejected because no Karpenter field accepts them.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let e = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    let mut s = input;
    if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    } else if s.starts_with('-') {
        return Err(e("negative durations are not allowed"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(e("empty"));
    }
    let mut total_nanos: u128 = 0;
    while !s.is_empty() {
        let int_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (int_part, rest) = s.split_at(int_end);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
                r.split_at(end)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(e("expected a number"));
        }
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_end);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(e("missing unit")),
            _ => return Err(e("unknown unit")),
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| e("number too large"))?
        };
        let mut nanos = int.checked_mul(unit_nanos).ok_or_else(|| e("overflow"))?;
        if !frac_part.is_empty() {
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac: u128 = digits.parse().map_err(|_| e("bad fraction"))?;
            let scale = 10u128.pow(u32::try_from(digits.len()).unwrap_or(18));
            nanos = nanos
                .checked_add(frac * unit_nanos / scale)
                .ok_or_else(|| e("overflow"))?;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(|| e("overflow"))?;
        s = rest;
    }
    // Go durations are int64 nanoseconds.
    if total_nanos > i64::MAX as u128 {
        return Err(e("overflow"));
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| e("overflow"))?;
    let sub = u32::try_from(total_nanos % 1_000_000_000).map_err(|_| e("overflow"))?;
    Ok(Duration::new(secs, sub))
}

/// Formats a duration as Go's `Duration.String()` does for whole seconds and above ("720h0m0s", "1m30s", "0s").
pub fn format_go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let nanos = d.subsec_nanos();
    if total == 0 && nanos == 0 {
        return "0s".to_string();
    }
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let secs = if nanos == 0 {
        format!("{s}s")
    } else {
        let frac = format!("{nanos:09}");
        format!("{s}.{}s", frac.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

/// A duration that keeps the text it was written as. Serialises back to that text.
#[derive(Clone, PartialEq, Eq)]
pub struct GoDuration {
    raw: String,
    value: Duration,
}

impl GoDuration {
    pub fn parse(raw: &str) -> Result<Self, DurationError> {
        Ok(Self {
            raw: raw.to_string(),
            value: parse_go_duration(raw)?,
        })
    }

    pub fn from_duration(value: Duration) -> Self {
        Self {
            raw: format_go_duration(value),
            value,
        }
    }

    pub fn duration(&self) -> Duration {
        self.value
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl fmt::Debug for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.raw)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(de::Error::custom)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> Cow<'static, str> {
        "GoDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": DURATION_PATTERN})
    }
}

/// A duration or `Never` (NodePool `expireAfter`, `consolidateAfter`). Keeps its text so it round-trips.
#[derive(Clone, PartialEq, Eq)]
pub enum NillableDuration {
    Never,
    After(GoDuration),
}

impl NillableDuration {
    pub const NEVER: &'static str = "Never";

    pub fn parse(raw: &str) -> Result<Self, DurationError> {
        if raw == Self::NEVER {
            Ok(Self::Never)
        } else {
            GoDuration::parse(raw).map(Self::After)
        }
    }

    /// `None` means never.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            Self::Never => None,
            Self::After(d) => Some(d.duration()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Never => Self::NEVER,
            Self::After(d) => d.as_str(),
        }
    }
}

impl fmt::Debug for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": NILLABLE_DURATION_PATTERN})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_go_syntax() {
        assert_eq!(
            parse_go_duration("720h").unwrap(),
            Duration::from_secs(720 * 3600)
        );
        assert_eq!(parse_go_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_go_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_go_duration("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_go_duration("0s").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("10").is_err(), "a unit is required");
        assert!(parse_go_duration("1d").is_err(), "days are not a Go unit");
        assert!(parse_go_duration("-5m").is_err());
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn never_round_trips_its_text() {
        let d: NillableDuration = serde_json::from_str("\"Never\"").unwrap();
        assert_eq!(d.duration(), None);
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"Never\"");
        let d: NillableDuration = serde_json::from_str("\"60m\"").unwrap();
        assert_eq!(d.duration(), Some(Duration::from_secs(3600)));
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            "\"60m\"",
            "the text is kept, not normalised"
        );
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::from_secs(720 * 3600)), "720h0m0s");
        assert_eq!(format_go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(secs in 0u64..10_000_000, millis in 0u32..1000) {
            let d = Duration::new(secs, millis * 1_000_000);
            prop_assert_eq!(parse_go_duration(&format_go_duration(d)).unwrap(), d);
        }
    }
}
