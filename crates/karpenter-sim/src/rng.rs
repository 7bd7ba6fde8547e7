//! A tiny seeded random number generator (SplitMix64) so runs are reproducible: uids, generateName suffixes and
//! probabilistic faults all come from it.

#[derive(Debug, Clone)]
pub struct Rng(u64);

// The API server's uids, names and faults use the rest.
#[cfg_attr(not(feature = "apiserver"), allow(dead_code))]
impl Rng {
    pub fn seeded(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A random (version 4 layout) UUID string, as Kubernetes uses for metadata.uid.
    pub fn uuid(&mut self) -> String {
        let (a, b) = (self.next_u64(), self.next_u64());
        let hex = format!("{a:016x}{b:016x}");
        format!(
            "{}-{}-4{}-a{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[13..16],
            &hex[17..20],
            &hex[20..32]
        )
    }

    /// The five-character suffix the API server appends to generateName (its alphabet avoids vowels).
    pub fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHABET[(self.next_u64() % ALPHABET.len() as u64) as usize] as char)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_uuid_shape() {
        let (mut a, mut b) = (Rng::seeded(7), Rng::seeded(7));
        assert_eq!(a.uuid(), b.uuid());
        let uuid = a.uuid();
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid.matches('-').count(), 4);
        assert_eq!(a.name_suffix().len(), 5);
        assert!((0.0..1.0).contains(&a.next_f64()));
    }
}
