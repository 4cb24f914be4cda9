//! Human units for `tcpls perf`, as iperf3 prints them: amounts in binary bytes (`MBytes` =
//! 2^20 bytes), rates in decimal bits per second (`Mbits/sec` = 10^6 bit/s), the unit chosen
//! per value (`-f a`, the default) or fixed with `-f k|m|g|t` (bits) or `-f K|M|G|T` (bytes).

use std::fmt;

/// `-f`: the unit of rates (and of amounts, for the byte formats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// The largest unit that keeps the value at or above 1.
    #[default]
    Auto,
    /// Bits per second with this power of 1000 (1 = kbit ... 4 = Tbit).
    Bits(u32),
    /// Bytes per second with this power of 1024 (1 = KByte ... 4 = TByte).
    Bytes(u32),
}

impl Format {
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "a" | "A" => Self::Auto,
            "k" => Self::Bits(1),
            "m" => Self::Bits(2),
            "g" => Self::Bits(3),
            "t" => Self::Bits(4),
            "K" => Self::Bytes(1),
            "M" => Self::Bytes(2),
            "G" => Self::Bytes(3),
            "T" => Self::Bytes(4),
            other => {
                return Err(format!(
                    "unknown format {other:?}: use a (automatic), k, m, g, t (bits/sec) or K, M, G, T (Bytes/sec)"
                ))
            }
        })
    }
}

const PREFIX: [&str; 5] = ["", "K", "M", "G", "T"];

/// The power of `base` that keeps `v` in 1..base (0 for small values).
fn auto_power(v: f64, base: f64) -> u32 {
    let mut p = 0;
    let mut v = v.abs();
    while v >= base && p < 4 {
        v /= base;
        p += 1;
    }
    p
}

/// Three significant digits at most, like iperf3 (`941`, `94.1`, `9.41`).
fn number(v: f64) -> String {
    if v >= 99.95 {
        format!("{v:.0}")
    } else if v >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// An amount of bytes: `1.10 GBytes`, `512 KBytes`, `17 Bytes`.
pub struct Amount(pub u64, pub Format);

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as f64;
        let p = match self.1 {
            Format::Bytes(p) => p,
            Format::Auto | Format::Bits(_) => auto_power(v, 1024.0),
        };
        if p == 0 {
            return write!(f, "{} Bytes", self.0);
        }
        write!(f, "{} {}Bytes", number(v / 1024f64.powi(p as i32)), PREFIX[p as usize])
    }
}

/// A rate given in bits per second: `941 Mbits/sec`, `12.5 Kbits/sec`, `117 MBytes/sec`.
pub struct Rate(pub f64, pub Format);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = if self.0.is_finite() { self.0.max(0.0) } else { 0.0 };
        match self.1 {
            Format::Bytes(p) => {
                let v = bits / 8.0 / 1024f64.powi(p as i32);
                write!(f, "{} {}Bytes/sec", number(v), PREFIX[p as usize])
            }
            Format::Bits(p) => write!(f, "{} {}bits/sec", number(bits / 1000f64.powi(p as i32)), PREFIX[p as usize]),
            Format::Auto => {
                let p = auto_power(bits, 1000.0);
                write!(f, "{} {}bits/sec", number(bits / 1000f64.powi(p as i32)), PREFIX[p as usize])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn automatic_units_never_show_zero_for_a_small_rate() {
        assert_eq!(Rate(941e6, Format::Auto).to_string(), "941 Mbits/sec");
        assert_eq!(Rate(4_710_000.0, Format::Auto).to_string(), "4.71 Mbits/sec");
        assert_eq!(Rate(12_500.0, Format::Auto).to_string(), "12.5 Kbits/sec");
        assert_eq!(Rate(800.0, Format::Auto).to_string(), "800 bits/sec");
        assert_eq!(Rate(2.5e9, Format::Auto).to_string(), "2.50 Gbits/sec");
        assert_eq!(Rate(0.0, Format::Auto).to_string(), "0.00 bits/sec");
    }

    #[test]
    fn fixed_units() {
        assert_eq!(Rate(941e6, Format::Bits(3)).to_string(), "0.94 Gbits/sec");
        assert_eq!(Rate(941e6, Format::Bits(1)).to_string(), "941000 Kbits/sec");
        assert_eq!(Rate(8.0 * 1048576.0, Format::Bytes(2)).to_string(), "1.00 MBytes/sec");
        assert_eq!(Amount(3 << 29, Format::Auto).to_string(), "1.50 GBytes");
        assert_eq!(Amount(17, Format::Auto).to_string(), "17 Bytes");
        assert_eq!(Amount(1 << 30, Format::Bytes(2)).to_string(), "1024 MBytes");
        assert!(Format::parse("x").is_err());
        assert_eq!(Format::parse("m").unwrap(), Format::Bits(2));
    }
}
