//! Resource arithmetic (the kube-free [`koord_queue_model::resources`]),
//! and its conversions from and to Kubernetes `ResourceList`s.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
pub use koord_queue_model::resources::{QuantityError, Resources, parse_quantity};

use crate::queue_unit::ResourceList;

/// [`Resources`] from and to a Kubernetes `ResourceList`.
pub trait ResourceListExt: Sized {
    /// Parses a ResourceList.
    fn from_list(list: &ResourceList) -> Result<Self, QuantityError>;
    /// Renders as a ResourceList (zero amounts omitted).
    fn to_list(&self) -> ResourceList;
}

impl ResourceListExt for Resources {
    fn from_list(list: &ResourceList) -> Result<Self, QuantityError> {
        Resources::from_quantities(list.iter().map(|(k, q)| (k.as_str(), q.0.as_str())))
    }

    fn to_list(&self) -> ResourceList {
        self.to_quantities()
            .map(|(k, text)| (k.to_string(), Quantity(text)))
            .collect()
    }
}

/// Renders an integer amount back as a quantity (`500m`, `2`, `1Gi`-free bytes).
pub fn format_quantity(resource: &str, amount: i64) -> Quantity {
    Quantity(koord_queue_model::format_quantity(resource, amount))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn resource_lists_round_trip() {
        let list: ResourceList = [
            ("cpu".to_string(), Quantity("1500m".into())),
            ("memory".to_string(), Quantity("1Gi".into())),
            ("nvidia.com/gpu".to_string(), Quantity("0".into())),
        ]
        .into();
        let r = Resources::from_list(&list).unwrap();
        assert_eq!(r.get("cpu"), 1500);
        assert_eq!(r.get("memory"), 1 << 30);
        let back = r.to_list();
        assert_eq!(back["cpu"].0, "1500m");
        assert_eq!(back["memory"].0, "1073741824");
        assert!(!back.contains_key("nvidia.com/gpu"), "zero amounts omitted");
        let bad: ResourceList = [("cpu".to_string(), Quantity("x".into()))].into();
        assert!(Resources::from_list(&bad).is_err());
    }
}
