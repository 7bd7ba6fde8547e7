//! Label keys and values as small integers.
//!
//! Scheduling compares labels millions of times per decision, so every key and value is interned once, at the
//! edge, into a [`Symbol`]. Inner loops then compare `u32`s and never touch a `String`.
//!
//! Values that are integers (`"4"`, `"8192"`) are the only ones `Gt`/`Lt`/`Gte`/`Lte` can match. So that a bounds
//! check needs no table look-up, a canonical decimal integer in `0..2^31` is encoded in the symbol itself (top bit
//! set, the number in the low 31 bits). That covers every integer a Kubernetes or Karpenter label carries (CPU
//! counts, memory in MiB, generations, bandwidth in Mbps). Label values cannot start with a sign, so the only
//! integers left out are spellings with leading zeros (`"007"`) and numbers of 2^31 or more: those intern as plain
//! strings and numeric bounds never match them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Marks a symbol that holds a small non-negative integer inline.
const INLINE_INT: u32 = 1 << 31;

/// An interned label key or value. Only meaningful with the [`LabelInterner`] that made it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Symbol(u32);

impl Symbol {
    /// The raw number, for callers that build their own dense indexes or bitsets over symbols.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The integer this value stands for, if it is one (see the module docs for which spellings count).
    #[inline]
    pub const fn as_int(self) -> Option<i64> {
        if self.0 & INLINE_INT != 0 {
            Some((self.0 & !INLINE_INT) as i64)
        } else {
            None
        }
    }

    #[inline]
    fn table_index(self) -> Option<usize> {
        if self.0 & INLINE_INT == 0 {
            Some(self.0 as usize)
        } else {
            None
        }
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_int() {
            Some(n) => write!(f, "Symbol(int {n})"),
            None => write!(f, "Symbol({})", self.0),
        }
    }
}

/// Parses the canonical decimal spelling of an integer in `0..2^31` ("0", "42"; not "042", "+4" or "-1").
pub(crate) fn canonical_small_int(s: &str) -> Option<u32> {
    let bytes = s.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || (bytes[0] == b'0' && bytes.len() > 1) {
        return None;
    }
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    u32::try_from(n).ok().filter(|&n| n < INLINE_INT)
}

/// Interns label keys and values into [`Symbol`]s and resolves them back for explanations and output.
///
/// One interner serves a whole snapshot: keys and values share it, so a symbol compares equal exactly when the
/// strings do.
#[derive(Clone, Debug)]
pub struct LabelInterner {
    strings: Vec<Arc<str>>,
    index: HashMap<Arc<str>, Symbol>,
    /// Spellings of inline integers, so they resolve back to `&str` like any other symbol.
    ints: HashMap<u32, Arc<str>>,
    /// Deprecated key -> the key it normalizes to.
    key_aliases: HashMap<Symbol, Symbol>,
}

impl Default for LabelInterner {
    fn default() -> Self {
        Self::new()
    }
}

impl LabelInterner {
    /// An interner that already normalizes deprecated keys (`failure-domain.beta.kubernetes.io/zone`,
    /// `beta.kubernetes.io/arch`, ...) to their stable form.
    pub fn new() -> Self {
        let mut interner = Self {
            strings: Vec::new(),
            index: HashMap::new(),
            ints: HashMap::new(),
            key_aliases: HashMap::new(),
        };
        // Deprecated keys mean the same as their stable keys, so requirements on either must meet (upstream
        // `v1.NormalizedLabels`); normalizing as keys are interned makes them the same symbol.
        for (from, to) in karpenter_api::labels::NORMALIZED_LABELS {
            interner.alias_key(from, to);
        }
        interner
    }

    /// Interns a label value (or any string) as it is.
    pub fn intern(&mut self, s: &str) -> Symbol {
        if let Some(n) = canonical_small_int(s) {
            self.ints.entry(n).or_insert_with(|| Arc::from(s));
            return Symbol(INLINE_INT | n);
        }
        if let Some(&sym) = self.index.get(s) {
            return sym;
        }
        let index = self.strings.len();
        if index >= INLINE_INT as usize {
            unreachable_table_full()
        }
        let sym = Symbol(index as u32);
        let stored: Arc<str> = Arc::from(s);
        self.strings.push(Arc::clone(&stored));
        self.index.insert(stored, sym);
        sym
    }

    /// Interns a label key, normalizing deprecated keys (`beta.kubernetes.io/arch` -> `kubernetes.io/arch`).
    pub fn intern_key(&mut self, key: &str) -> Symbol {
        let sym = self.intern(key);
        self.key_aliases.get(&sym).copied().unwrap_or(sym)
    }

    /// Makes `from` a synonym of `to` for keys interned from now on (a provider adds its own, such as
    /// `topology.ebs.csi.aws.com/zone`).
    pub fn alias_key(&mut self, from: &str, to: &str) {
        let to = self.intern(to);
        let from = self.intern(from);
        if from != to {
            self.key_aliases.insert(from, to);
        }
    }

    /// The symbol of a string interned before, without interning it.
    pub fn lookup(&self, s: &str) -> Option<Symbol> {
        if let Some(n) = canonical_small_int(s) {
            return self.ints.contains_key(&n).then_some(Symbol(INLINE_INT | n));
        }
        self.index.get(s).copied()
    }

    /// The symbol of a key interned before, normalized like [`LabelInterner::intern_key`].
    pub fn lookup_key(&self, key: &str) -> Option<Symbol> {
        let sym = self.lookup(key)?;
        Some(self.key_aliases.get(&sym).copied().unwrap_or(sym))
    }

    /// The string a symbol stands for. A symbol from another interner resolves to `"<unknown>"`.
    pub fn resolve(&self, sym: Symbol) -> &str {
        let found = match sym.table_index() {
            Some(i) => self.strings.get(i).map(|s| &**s),
            None => self.ints.get(&(sym.0 & !INLINE_INT)).map(|s| &**s),
        };
        found.unwrap_or("<unknown>")
    }

    /// How many distinct strings are interned.
    pub fn len(&self) -> usize {
        self.strings.len() + self.ints.len()
    }

    /// Whether nothing is interned yet (the built-in key aliases count as interned).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cold]
fn unreachable_table_full() -> ! {
    // 2^31 distinct label strings would take tens of gigabytes; no snapshot gets near it.
    panic!("label interner is full (2^31 distinct strings)")
}

/// Keys a pod may select even when the node side does not define them (upstream `AllowUndefinedWellKnownLabels`):
/// the well-known labels every instance type or offering sets, such as zone, architecture or instance family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WellKnownKeys {
    /// Bit per table symbol, for an O(1) test in `Requirements::compatible`.
    bits: Vec<u64>,
    /// Every member, in insertion order, for typo suggestions and listing.
    members: Vec<Symbol>,
}

impl WellKnownKeys {
    /// The keys every launched node carries (`karpenter_api::labels::WELL_KNOWN_LABELS`: NodePool, zone, region,
    /// instance type, architecture, OS, capacity type, Windows build). A provider adds its own
    /// (`karpenter.k8s.aws/instance-family`, ...) and a catalog file's `wellKnownLabels` with [`Self::insert`].
    pub fn core(interner: &mut LabelInterner) -> Self {
        Self::from_names(interner, karpenter_api::labels::WELL_KNOWN_LABELS)
    }

    /// No key is allowed undefined (upstream's default `CompatibilityOptions`).
    pub fn none() -> Self {
        Self::default()
    }

    /// Interns and adds each name as a key.
    pub fn from_names<'a>(interner: &mut LabelInterner, names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut keys = Self::none();
        for name in names {
            keys.insert(interner.intern_key(name));
        }
        keys
    }

    pub fn insert(&mut self, key: Symbol) {
        if self.contains(key) {
            return;
        }
        if let Some(i) = key.table_index() {
            let word = i / 64;
            if self.bits.len() <= word {
                self.bits.resize(word + 1, 0);
            }
            self.bits[word] |= 1 << (i % 64);
        }
        self.members.push(key);
    }

    #[inline]
    pub fn contains(&self, key: Symbol) -> bool {
        match key.table_index() {
            Some(i) => self.bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0),
            // An all-digit key ("123") is legal but never well-known in practice; a scan is fine.
            None => self.members.contains(&key),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Symbol> + '_ {
        self.members.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_the_same_string_twice_gives_the_same_symbol() {
        let mut i = LabelInterner::new();
        let a = i.intern("us-east-1a");
        assert_eq!(a, i.intern("us-east-1a"));
        assert_ne!(a, i.intern("us-east-1b"));
        assert_eq!(i.resolve(a), "us-east-1a");
    }

    #[test]
    fn canonical_integers_are_inline_and_resolve_back() {
        let mut i = LabelInterner::new();
        let four = i.intern("4");
        assert_eq!(four.as_int(), Some(4));
        assert_eq!(i.resolve(four), "4");
        assert_eq!(i.intern("2147483647").as_int(), Some(2_147_483_647));
        assert_eq!(i.lookup("4"), Some(four));
        assert_eq!(i.lookup("5"), None, "an integer never interned is not known");
    }

    #[test]
    fn non_canonical_integers_are_plain_strings() {
        let mut i = LabelInterner::new();
        for s in ["007", "+4", "-1", "2147483648", "1.5", "", "4a"] {
            let sym = i.intern(s);
            assert_eq!(sym.as_int(), None, "{s:?}");
            assert_eq!(i.resolve(sym), s);
        }
    }

    #[test]
    fn beta_keys_normalize_to_ga_keys() {
        let mut i = LabelInterner::new();
        let zone = i.intern_key("topology.kubernetes.io/zone");
        assert_eq!(i.intern_key("failure-domain.beta.kubernetes.io/zone"), zone);
        assert_eq!(i.lookup_key("failure-domain.beta.kubernetes.io/zone"), Some(zone));
        // Values are never normalized.
        assert_ne!(i.intern("failure-domain.beta.kubernetes.io/zone"), zone);
        assert_eq!(i.intern_key("topology.ebs.csi.aws.com/zone"), zone);
        i.alias_key("example.com/old-zone", "topology.kubernetes.io/zone");
        assert_eq!(i.intern_key("example.com/old-zone"), zone);
    }

    #[test]
    fn well_known_keys_answer_membership() {
        let mut i = LabelInterner::new();
        let wk = WellKnownKeys::from_names(&mut i, ["kubernetes.io/arch", "123"]);
        assert!(wk.contains(i.intern_key("kubernetes.io/arch")));
        assert!(wk.contains(i.intern_key("beta.kubernetes.io/arch")));
        assert!(wk.contains(i.intern_key("123")));
        assert!(!wk.contains(i.intern_key("example.com/team")));
        assert_eq!(wk.len(), 2);
        assert!(!WellKnownKeys::none().contains(i.intern_key("kubernetes.io/arch")));
        let core = WellKnownKeys::core(&mut i);
        assert!(core.contains(i.intern_key("topology.kubernetes.io/zone")));
        assert!(core.contains(i.intern_key("karpenter.sh/capacity-type")));
        assert!(!core.contains(i.intern_key("example.com/team")));
    }
}
