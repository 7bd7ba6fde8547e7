//! EC2 Describe* filters from EC2NodeClass selector terms. A term's fields are ANDed, terms are ORed (one
//! Describe call per term, results merged); a tag value of `*` matches any value (a `tag-key` filter).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

/// The filters of one term: its tags, and `fields` (EC2 filter name, value) such as ("subnet-id", id).
pub fn term_filters(tags: Option<&BTreeMap<String, String>>, fields: &[(&str, Option<&str>)]) -> Vec<Filter> {
    let mut filters: Vec<Filter> = fields
        .iter()
        .filter_map(|(name, value)| Some(Filter::builder().name(*name).values((*value)?).build()))
        .collect();
    for (key, value) in tags.into_iter().flatten() {
        filters.push(if value == "*" {
            Filter::builder().name("tag-key").values(key).build()
        } else {
            Filter::builder().name(format!("tag:{key}")).values(value).build()
        });
    }
    filters
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_ids_and_wildcards() {
        let tags = BTreeMap::from([
            ("karpenter.sh/discovery".to_string(), "demo".to_string()),
            ("team".to_string(), "*".to_string()),
        ]);
        let filters = term_filters(
            Some(&tags),
            &[("subnet-id", Some("subnet-1")), ("group-name", None)],
        );
        let pairs: Vec<(&str, &[String])> = filters
            .iter()
            .map(|f| (f.name().unwrap_or_default(), f.values()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("subnet-id", &["subnet-1".to_string()][..]),
                ("tag:karpenter.sh/discovery", &["demo".to_string()][..]),
                ("tag-key", &["team".to_string()][..]),
            ]
        );
        assert!(term_filters(None, &[]).is_empty());
    }
}
