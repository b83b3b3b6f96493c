//! Kubernetes quantities of bytes (`resource.Quantity`, k8s.io/apimachinery
//! `pkg/api/resource/quantity.go`), as the plugin's `--config` (MPS limits, memory units)
//! and the DRA driver's opaque `GpuConfig` (`pinnedMemoryLimit`) take them: one parser, so a
//! limit means the same to both.
//!
//! An integer with an optional suffix: binary `Ki` … `Ei`, decimal `k`, `M` … `E`, or a
//! decimal exponent `e<n>` / `E<n>` (`1e9`, `1e+9`). Whole bytes only: no fraction (`1.5Gi`), no sign,
//! no milli units.

/// Why a text is not a quantity of bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity of bytes: a whole number with a Kubernetes suffix, such as 256Mi, 1Gi, 512M or 1e9")]
    Malformed(String),
    #[error("{0:?} is more bytes than fit in 64 bits")]
    TooLarge(String),
}

/// The bytes `text` stands for.
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    let malformed = || QuantityError::Malformed(text.to_string());
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(malformed());
    }
    let (number, suffix) = text.split_at(digits);
    let too_large = || QuantityError::TooLarge(text.to_string());
    let n: u64 = number.parse().map_err(|_| too_large())?;
    let factor: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        e if e.starts_with(['e', 'E']) => {
            // A sign is allowed (`1e+9`); a negative exponent would be a fraction.
            let exponent: u32 = e[1..].parse().map_err(|_| malformed())?;
            10u64.checked_pow(exponent).ok_or_else(too_large)?
        }
        _ => return Err(malformed()),
    };
    n.checked_mul(factor).ok_or_else(too_large)
}

/// Every program that reads a quantity of bytes passes this table (its own tests run it
/// through its own reader): the text and the bytes, or `None` where it must be refused.
pub const CASES: &[(&str, Option<u64>)] = &[
    ("1048576", Some(1 << 20)),
    ("512Mi", Some(512 << 20)),
    ("4Gi", Some(4 << 30)),
    ("2Ti", Some(2 << 40)),
    ("1Pi", Some(1 << 50)),
    ("1Ei", Some(1 << 60)),
    ("2000k", Some(2_000_000)),
    ("512M", Some(512_000_000)),
    ("1G", Some(1_000_000_000)),
    ("1T", Some(1_000_000_000_000)),
    ("1P", Some(1_000_000_000_000_000)),
    ("1E", Some(1_000_000_000_000_000_000)),
    ("1e9", Some(1_000_000_000)),
    ("4E9", Some(4_000_000_000)),
    ("1.5Gi", None),
    ("Gi", None),
    ("", None),
    ("-1Gi", None),
    ("+1Gi", None),
    ("1 Gi", None),
    ("1gi", None),
    ("1e", None),
    ("1e+9", Some(1_000_000_000)),
    ("1e-3", None),
    ("500m", None),
    ("16Ei", None),
    ("99999999999999999999", None),
    ("1e20", None),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_table() {
        for (text, bytes) in CASES {
            assert_eq!(parse_bytes(text).ok(), *bytes, "{text:?}");
        }
    }

    #[test]
    fn errors_say_what_was_wrong() {
        assert!(parse_bytes("1.5Gi")
            .unwrap_err()
            .to_string()
            .contains("is not a quantity of bytes: a whole number"));
        assert_eq!(
            parse_bytes("16Ei"),
            Err(QuantityError::TooLarge("16Ei".into()))
        );
    }
}
