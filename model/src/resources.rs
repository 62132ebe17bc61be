//! Resource arithmetic on integers (docs/quota.md): CPU in millicores, memory
//! and storage in bytes, everything else (e.g. `nvidia.com/gpu`, `pods`) as a
//! count. Quantities are parsed exactly as Kubernetes writes them and rounded
//! up, as Kubernetes does when it converts a quantity to an integer.

use std::borrow::Cow;
use std::fmt;

/// A set of resources as integer amounts (see the module documentation for units).
///
/// Kept as a vector sorted by name, with the common names static: the
/// scheduler holds several per unit for 100,000 units, and a `BTreeMap`
/// node plus a heap string per name costs ~400 bytes for `cpu` + `memory`
/// where this costs ~70 (architecture §9).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources(Vec<(Name, i64)>);

/// A resource name; the common ones are not allocated.
type Name = Cow<'static, str>;

/// Names stored without an allocation.
const STATIC_NAMES: &[&str] = &[
    "cpu",
    "memory",
    "pods",
    "ephemeral-storage",
    "nvidia.com/gpu",
];

fn name_of(name: &str) -> Name {
    match STATIC_NAMES.iter().find(|n| **n == name) {
        Some(n) => Cow::Borrowed(n),
        None => Cow::Owned(name.to_string()),
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Resources")
            .field(&DebugMap(&self.0))
            .finish()
    }
}

struct DebugMap<'a>(&'a [(Name, i64)]);

impl fmt::Debug for DebugMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k.as_ref(), v)))
            .finish()
    }
}

/// A quantity that is not valid Kubernetes syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?} for {resource}: {reason}")]
pub struct QuantityError {
    /// The resource name.
    pub resource: String,
    /// The offending text.
    pub value: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// Whether `resource` is measured in thousandths: CPU, also under the
/// `requests.`/`limits.` names a ResourceQuota uses.
fn is_milli(resource: &str) -> bool {
    matches!(resource, "cpu" | "requests.cpu" | "limits.cpu")
}

/// Parses a Kubernetes quantity into an integer of the resource's unit,
/// rounding up: millicores for CPU, whole units otherwise.
pub fn parse_quantity(resource: &str, text: &str) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        resource: resource.to_string(),
        value: text.to_string(),
        reason,
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Split the number from the suffix.
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(err("not a number"));
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // value = digits * 10^(exp10 - frac_len) * 2^exp2
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(-30..=30).contains(&exp) {
                return Err(err("exponent out of range"));
            }
            (exp, 0)
        }
        _ => return Err(err("unknown suffix")),
    };
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err("too many digits"));
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err("not a number"))?
    };
    // Scale to the target unit: thousandths for CPU.
    let unit_exp10 = if is_milli(resource) { 3 } else { 0 };
    let exp = exp10 - frac_part.len() as i32 + unit_exp10;
    let mut value = mantissa
        .checked_mul(1i128 << exp2)
        .ok_or_else(|| err("too large"))?;
    if exp >= 0 {
        let scale = 10i128
            .checked_pow(exp as u32)
            .ok_or_else(|| err("too large"))?;
        value = value.checked_mul(scale).ok_or_else(|| err("too large"))?;
    } else {
        let scale = 10i128
            .checked_pow((-exp) as u32)
            .ok_or_else(|| err("too small"))?;
        // Round up (away from zero for the magnitude), as Kubernetes does.
        value = (value + scale - 1) / scale;
    }
    let value = i64::try_from(value).map_err(|_| err("too large"))?;
    Ok(if negative { -value } else { value })
}

/// Renders an integer amount back as quantity text (`500m`, `2`, `1Gi`-free bytes).
pub fn format_quantity(resource: &str, amount: i64) -> String {
    if is_milli(resource) {
        if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        }
    } else {
        amount.to_string()
    }
}

impl Resources {
    /// No resources.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `(name, quantity text)` pairs (a ResourceList's entries).
    pub fn from_quantities<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, QuantityError> {
        let mut out = Self::new();
        for (name, text) in entries {
            let amount = parse_quantity(name, text)?;
            *out.entry(name, amount) = amount;
        }
        // Kept for as long as the record that holds it: without the spare
        // capacity of its growth (4 slots for `cpu` + `memory`), 64 bytes
        // less for each of 100,000 units.
        out.0.shrink_to_fit();
        Ok(out)
    }

    /// Renders as `(name, quantity text)` pairs in name order (zero amounts
    /// omitted).
    pub fn to_quantities(&self) -> impl Iterator<Item = (&str, String)> {
        self.0
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| (k.as_ref(), format_quantity(k, *v)))
    }

    fn find(&self, resource: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(resource))
    }

    /// The amount of `resource`, inserted as `default` when absent.
    fn entry(&mut self, resource: &str, default: i64) -> &mut i64 {
        let i = match self.find(resource) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (name_of(resource), default));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Amount of `resource` (0 when absent).
    pub fn get(&self, resource: &str) -> i64 {
        self.find(resource).map_or(0, |i| self.0[i].1)
    }

    /// Sets the amount of `resource`.
    pub fn set(&mut self, resource: impl Into<String>, amount: i64) {
        let resource = resource.into();
        *self.entry(&resource, amount) = amount;
    }

    /// Whether `resource` is named (even with amount 0).
    pub fn contains(&self, resource: &str) -> bool {
        self.find(resource).is_ok()
    }

    /// Iterates `(resource, amount)` in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|(_, v)| *v == 0)
    }

    /// `self += other` (saturating).
    pub fn add(&mut self, other: &Self) {
        for (k, v) in &other.0 {
            let e = self.entry(k, 0);
            *e = e.saturating_add(*v);
        }
    }

    /// `self -= other` (saturating; amounts may go negative only if they were).
    pub fn sub(&mut self, other: &Self) {
        for (k, v) in &other.0 {
            let e = self.entry(k, 0);
            *e = e.saturating_sub(*v);
        }
    }

    /// `self * n` for every amount (saturating).
    pub fn scaled(&self, n: i64) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_mul(n)))
                .collect(),
        )
    }

    /// Elementwise maximum with `other`.
    pub fn max_with(&mut self, other: &Self) {
        for (k, v) in &other.0 {
            let e = self.entry(k, *v);
            *e = (*e).max(*v);
        }
    }
}

impl FromIterator<(String, i64)> for Resources {
    fn from_iter<I: IntoIterator<Item = (String, i64)>>(iter: I) -> Self {
        // Later amounts of a name replace earlier ones, as in a map.
        let mut out = Self::new();
        for (k, v) in iter {
            out.set(k, v);
        }
        out
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}: {}", format_quantity(k, v))?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_map_sorted_by_name() {
        let mut r = Resources::new();
        r.set("nvidia.com/gpu", 2);
        r.set("example.com/fpga", 1);
        r.set("cpu", 1000);
        r.set("cpu", 2000);
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            [
                ("cpu", 2000),
                ("example.com/fpga", 1),
                ("nvidia.com/gpu", 2)
            ]
        );
        let mut other: Resources = [("memory".to_string(), 5), ("cpu".to_string(), 1)]
            .into_iter()
            .collect();
        other.add(&r);
        assert_eq!(other.get("cpu"), 2001);
        assert_eq!(other.get("memory"), 5);
        assert!(other.contains("example.com/fpga") && !other.contains("pods"));
        // Static and allocated names are the same name.
        let mut owned = Resources::new();
        owned.0.push((Cow::Owned("cpu".to_string()), 1));
        let borrowed: Resources = [("cpu".to_string(), 1)].into_iter().collect();
        assert_eq!(owned, borrowed);
        assert_eq!(format!("{borrowed:?}"), r#"Resources({"cpu": 1})"#);
    }

    #[test]
    fn parses_kubernetes_quantities() {
        let cases = [
            ("cpu", "1", 1000),
            ("cpu", "100m", 100),
            ("cpu", "0.5", 500),
            ("cpu", "1.5", 1500),
            ("cpu", "2500u", 3),
            ("cpu", "1e3", 1_000_000),
            ("cpu", "0.0001", 1),
            ("memory", "1Gi", 1 << 30),
            ("memory", "1.5Gi", 3 << 29),
            ("memory", "128974848", 128_974_848),
            ("memory", "129e6", 129_000_000),
            ("memory", "129M", 129_000_000),
            ("memory", "123Mi", 123 << 20),
            ("memory", "1k", 1000),
            ("memory", "1Ki", 1024),
            ("memory", "500m", 1),
            ("nvidia.com/gpu", "2", 2),
            ("pods", "110", 110),
            ("cpu", "-1", -1000),
            ("cpu", "+2", 2000),
            ("cpu", "0", 0),
            ("cpu", ".5", 500),
        ];
        for (res, text, want) in cases {
            assert_eq!(parse_quantity(res, text), Ok(want), "{res}={text}");
        }
    }

    #[test]
    fn rejects_malformed_quantities() {
        for text in [
            "",
            "abc",
            "1.2.3",
            "1Qi",
            "1e",
            "1e99",
            "--1",
            ".",
            "1 Gi",
            "99999999999999999999999999999999999",
        ] {
            assert!(parse_quantity("memory", text).is_err(), "{text:?} accepted");
        }
    }

    #[test]
    fn arithmetic_and_rendering() {
        let r = Resources::from_quantities([("cpu", "1500m"), ("memory", "1Gi")]).unwrap();
        let mut total = r.scaled(2);
        assert_eq!(total.get("cpu"), 3000);
        total.sub(&r);
        assert_eq!(total, r);
        let mut m = Resources::from_iter([("cpu".to_string(), 200)]);
        m.max_with(&Resources::from_iter([
            ("cpu".to_string(), 100),
            ("gpu".to_string(), 1),
        ]));
        assert_eq!(m.get("cpu"), 200);
        assert_eq!(m.get("gpu"), 1);
        let texts: Vec<_> = r.to_quantities().collect();
        assert_eq!(texts[0], ("cpu", "1500m".to_string()));
        assert_eq!(
            Resources::from_iter([("cpu".to_string(), 2000)])
                .to_quantities()
                .collect::<Vec<_>>(),
            [("cpu", "2".to_string())]
        );
        assert_eq!(r.to_string(), "cpu: 1500m, memory: 1073741824");
    }
}
