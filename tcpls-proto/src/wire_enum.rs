//! One declarative macro for the enums whose variants stand for one-byte wire codes (the frame
//! type byte, TLS alert descriptions): each variant and its code are written once, and the
//! macro derives everything else from that single list.

/// Declares a fieldless `#[repr(u8)]` enum from `Variant = code` pairs and generates, from the
/// same list:
/// - `ALL`: every variant, in the order written (keep it the code order);
/// - `from_u8(code) -> Option<Self>`: `None` for a code outside the list;
/// - `name(self) -> &'static str`: the variant's name as written;
/// - `From<Enum> for u8`: the code.
///
/// The enum derives `Debug, Clone, Copy, PartialEq, Eq, Hash`. A code written twice does not
/// compile (the `#[repr(u8)]` discriminants must be distinct).
///
/// ```ignore
/// wire_enum! {
///     /// Doc of the enum.
///     pub enum Color {
///         Red = 0x01,
///         Green = 0x02,
///     }
/// }
/// ```
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        #[allow(dead_code)]
        impl $name {
            /// Every variant, in the order of the wire code table; lets tests and tools cover it all.
            pub const ALL: [Self; [$($code),+].len()] = [$(Self::$variant),+];

            /// Parses a wire code; `None` for a code outside the table.
            pub fn from_u8(code: u8) -> Option<Self> {
                match code {
                    $( $code => Some(Self::$variant), )+
                    _ => None,
                }
            }

            /// The variant's name, as written in the table.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => stringify!($variant), )+
                }
            }
        }

        impl From<$name> for u8 {
            fn from(v: $name) -> u8 {
                v as u8
            }
        }
    };
}

pub(crate) use wire_enum;

#[cfg(test)]
mod tests {
    wire_enum! {
        /// A table with a gap, to check the generated parts agree with each other.
        enum Sample {
            Zero = 0x00,
            One = 0x01,
            Gap = 0x10,
        }
    }

    #[test]
    fn generated_parts_agree() {
        assert_eq!(Sample::ALL, [Sample::Zero, Sample::One, Sample::Gap]);
        for v in Sample::ALL {
            assert_eq!(Sample::from_u8(u8::from(v)), Some(v));
            assert_eq!(format!("{v:?}"), v.name());
        }
        assert_eq!(u8::from(Sample::Gap), 0x10);
        let known: Vec<u8> = Sample::ALL.iter().map(|&v| v.into()).collect();
        for b in 0..=255u8 {
            assert_eq!(Sample::from_u8(b).is_some(), known.contains(&b), "{b:#x}");
        }
    }
}
