//! `kube::Resource` for reduced views of objects of any kind.

/// Implements `kube::Resource` for `$view`, a reduced view of objects of a
/// kind named at run time (by an `ApiResource`, as `DynamicObject` is),
/// whose `metadata: ObjectMeta` field holds what it keeps of the metadata.
macro_rules! dynamic_resource {
    ($view:ty) => {
        impl kube::core::Resource for $view {
            type DynamicType = kube::core::ApiResource;
            type Scope = kube::core::DynamicResourceScope;

            fn kind(dt: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.kind.as_str().into()
            }
            fn group(dt: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.group.as_str().into()
            }
            fn version(dt: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.version.as_str().into()
            }
            fn api_version(dt: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.api_version.as_str().into()
            }
            fn plural(dt: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.plural.as_str().into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use dynamic_resource;
