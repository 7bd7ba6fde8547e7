//! Where the CloudProvider reads EC2NodeClasses: a [`NodeClassSource`] (the API server through a
//! `kube::Client`, or anything else in tests), and a cache of the last copy seen of each, which drift reads
//! (drift must answer from memory, never waiting on the API server).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use kube::Api;

use crate::error::AwsError;

/// Reads EC2NodeClasses by name.
#[async_trait]
pub trait NodeClassSource: Send + Sync {
    /// The EC2NodeClass `name`; None when it does not exist.
    async fn get(&self, name: &str) -> Result<Option<EC2NodeClass>, AwsError>;
}

/// EC2NodeClasses from the API server (cluster-scoped).
#[derive(Clone)]
pub struct KubeNodeClasses {
    api: Api<EC2NodeClass>,
}

impl KubeNodeClasses {
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
        }
    }
}

#[async_trait]
impl NodeClassSource for KubeNodeClasses {
    async fn get(&self, name: &str) -> Result<Option<EC2NodeClass>, AwsError> {
        Ok(self.api.get_opt(name).await?)
    }
}

/// The last copy of each EC2NodeClass the provider or the EC2NodeClass controller saw.
#[derive(Debug, Default)]
pub struct NodeClassCache {
    by_name: RwLock<HashMap<String, Arc<EC2NodeClass>>>,
}

impl NodeClassCache {
    pub fn get(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.by_name
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    pub fn insert(&self, node_class: EC2NodeClass) -> Arc<EC2NodeClass> {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        let node_class = Arc::new(node_class);
        self.by_name
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, Arc::clone(&node_class));
        node_class
    }

    pub fn remove(&self, name: &str) {
        self.by_name
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}
