//! The KWOK cloud provider: instances are Node objects that kwok (or `karpenter simulate --serve`) plays, so
//! Karpenter runs against any API server without a cloud.
//!
//! - [`provider`]: [`KwokCloudProvider`], which serves KWOKNodeClass NodePools as upstream's KWOK provider does
//!   and EC2NodeClass NodePools from the AWS catalog;
//! - [`catalog`]: upstream's `instance_types.json` as core's instance types (pure);
//! - [`catalog_file`]: where that file is read from (a named file, else the Go module cache);
//! - [`launch`]: which offering a KWOKNodeClass launch takes and the Node it creates (pure);
//! - [`aws_catalog`]: the EC2NodeClass mode.

pub mod aws_catalog;
pub mod catalog;
pub mod catalog_file;
mod error;
pub mod launch;
pub mod provider;

pub use aws_catalog::AwsCatalogKwok;
pub use catalog_file::{GoEnv, UPSTREAM_MODULE, default_catalog_path};
pub use error::KwokError;
pub use provider::{KWOK_NODE_CLASS, KwokCloudProvider};
