//! Quantities as the pages show them: sums of the API's quantity maps, and
//! how full one map is against another (the bars of the quota tree).

use std::collections::BTreeMap;

use koord_queue_model::resources::parse_quantity;
use serde_json::{Map, Value};

/// Integer amounts by resource (millicores for CPU, units otherwise).
pub type Amounts = BTreeMap<String, i64>;

/// The amounts of a quantity map (`{"cpu": "500m"}`); unreadable entries
/// are left out (the API writes only what it parsed).
pub fn parse(map: &Value) -> Amounts {
    map.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), parse_quantity(k, v.as_str()?).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A resource list of an object (a unit's requests) as text a person reads.
pub fn show_list(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Value {
    show(
        &list
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), parse_quantity(k, &v.0).ok()?)))
            .collect(),
    )
}

/// `a + b`, by resource.
pub fn add(a: &mut Amounts, b: &Amounts) {
    for (k, v) in b {
        *a.entry(k.clone()).or_default() += v;
    }
}

/// The amounts as text a person reads: cores, binary units for bytes.
pub fn show(amounts: &Amounts) -> Value {
    Value::Object(
        amounts
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(readable(k, *v))))
            .collect::<Map<_, _>>(),
    )
}

/// One amount as text: `2.5` cores, `3Gi`, `512Mi`, a count.
pub fn readable(resource: &str, amount: i64) -> String {
    if matches!(resource, "cpu" | "requests.cpu" | "limits.cpu") {
        return if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{}", amount as f64 / 1000.0)
        };
    }
    let bytes = resource.contains("memory") || resource.contains("storage");
    if bytes {
        for (unit, size) in [
            ("Ti", 1i64 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ] {
            if amount.abs() >= size {
                let value = amount as f64 / size as f64;
                return if amount % size == 0 {
                    format!("{}{unit}", amount / size)
                } else {
                    format!("{value:.1}{unit}")
                };
            }
        }
    }
    amount.to_string()
}

/// The fullest resource of `used` against `of`, in percent (resources `of`
/// does not name are not limited; `None` when it names none).
pub fn percent(used: &Amounts, of: &Amounts) -> Option<f64> {
    of.iter()
        .filter(|(_, limit)| **limit > 0)
        .map(|(k, limit)| used.get(k).copied().unwrap_or(0) as f64 * 100.0 / *limit as f64)
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_add_up_and_read_well() {
        let mut total = parse(&json!({"cpu": "500m", "memory": "1Gi"}));
        add(
            &mut total,
            &parse(&json!({"cpu": "2", "memory": "512Mi", "x": "bad"})),
        );
        assert_eq!(show(&total), json!({"cpu": "2.5", "memory": "1.5Gi"}));
        assert_eq!(readable("nvidia.com/gpu", 3), "3");
        assert_eq!(readable("memory", 1 << 30), "1Gi");
    }

    #[test]
    fn the_fullest_resource_is_the_percentage() {
        let used = parse(&json!({"cpu": "3", "memory": "1Gi"}));
        let max = parse(&json!({"cpu": "4", "memory": "4Gi"}));
        assert_eq!(percent(&used, &max), Some(75.0));
        assert_eq!(percent(&used, &Amounts::new()), None);
    }
}
