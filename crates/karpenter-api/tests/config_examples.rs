//! Every example manifest in config/ parses strictly (no unknown field), validates under the AWS flavour, and
//! round-trips: parse, serialise, parse gives the same object with no field lost or added.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::{fs, path::PathBuf};

use karpenter_api::{
    capacitybuffer::CapacityBuffer,
    crd,
    ec2nodeclass::EC2NodeClass,
    label_policy::LabelPolicy,
    manifest::{decode_strict, split_documents},
    nodeoverlay::NodeOverlay,
    nodepool::NodePool,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn config_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config")
}

/// Decodes strictly, serialises, and checks the JSON is exactly what was read.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<T, String> {
    let object: T = decode_strict(doc).map_err(|e| e.to_string())?;
    let written = serde_json::to_value(&object).map_err(|e| e.to_string())?;
    if written != *doc {
        return Err(format!(
            "round trip changed the object:\nread:    {doc}\nwritten: {written}"
        ));
    }
    let again: T = decode_strict(&written).map_err(|e| e.to_string())?;
    if serde_json::to_value(&again).map_err(|e| e.to_string())? != written {
        return Err("second round trip changed the object".into());
    }
    Ok(again)
}

fn check_crd(
    file: &str,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    doc: &Value,
) -> Vec<String> {
    let mut problems: Vec<String> = support::schema_errors(crd, doc)
        .into_iter()
        .map(|e| format!("{file}: schema: {e}"))
        .collect();
    problems.extend(
        support::cel_errors(crd, doc, None)
            .into_iter()
            .map(|e| format!("{file}: CEL: {e}")),
    );
    problems
}

#[test]
fn every_config_example_parses_validates_and_round_trips() {
    let mut files: Vec<PathBuf> = fs::read_dir(config_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the example manifests in config/, found {}",
        files.len()
    );

    let mut problems = Vec::new();
    let mut kinds = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = fs::read_to_string(path).unwrap();
        for doc in split_documents(&text) {
            let doc = match doc {
                Ok(doc) => doc,
                Err(e) => {
                    problems.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let result = match kind.as_str() {
                "NodePool" => round_trip::<NodePool>(&doc)
                    .and_then(|o| o.validate(LabelPolicy::Aws).map_err(|e| e.to_string())),
                "EC2NodeClass" => {
                    round_trip::<EC2NodeClass>(&doc).and_then(|o| o.validate().map_err(|e| e.to_string()))
                }
                "NodeOverlay" => round_trip::<NodeOverlay>(&doc)
                    .and_then(|o| o.validate(LabelPolicy::Aws).map_err(|e| e.to_string())),
                "CapacityBuffer" => {
                    round_trip::<CapacityBuffer>(&doc).and_then(|o| o.validate().map_err(|e| e.to_string()))
                }
                other => Err(format!("unexpected kind {other:?}")),
            };
            if let Err(e) = result {
                problems.push(format!("{name}: {e}"));
            }
            let generated = match kind.as_str() {
                "NodePool" => crd::nodepool(LabelPolicy::Aws).ok(),
                "EC2NodeClass" => crd::ec2nodeclass().ok(),
                "NodeOverlay" => crd::nodeoverlay(LabelPolicy::Aws).ok(),
                "CapacityBuffer" => crd::capacitybuffer().ok(),
                _ => None,
            };
            if let Some(generated) = generated {
                problems.extend(check_crd(&name, &generated, &doc));
            }
            kinds.push(kind);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for kind in ["NodePool", "EC2NodeClass", "NodeOverlay", "CapacityBuffer"] {
        assert!(kinds.iter().any(|k| k == kind), "config/ has no {kind} example");
    }
}

#[test]
fn unknown_fields_in_a_manifest_are_reported() {
    let text = fs::read_to_string(config_dir().join("nodepool-general-purpose.yaml")).unwrap();
    let mut doc = split_documents(&text).remove(0).unwrap();
    doc["spec"]["template"]["spec"]["requirment"] = serde_json::json!([]);
    let err = decode_strict::<NodePool>(&doc).unwrap_err();
    assert_eq!(err.path, "spec.template.spec.requirment");
    assert!(
        err.to_string()
            .starts_with("NodePool default: spec.template.spec.requirment: unknown field"),
        "{err}"
    );
}
