//! Instance tenancy: a NodeClaim whose requirements rule out `karpenter.k8s.aws/instance-tenancy=default` (a
//! NodePool or pod asking for `In [dedicated]`, or `NotIn [default]`) launches dedicated instances: its launch
//! template's placement says `Tenancy: dedicated`. Every other claim launches on shared hardware, the cheaper
//! choice when both are allowed (every instance type offers both, see the catalog's tenancy requirement).

use karpenter_api::common::{NodeSelectorRequirementWithMinValues, Operator};
use karpenter_api::labels::AWS_INSTANCE_TENANCY_LABEL;

/// EC2's tenancy values, as the label spells them.
pub const DEFAULT: &str = "default";
pub const DEDICATED: &str = "dedicated";

/// The tenancy a claim with `requirements` launches with.
pub fn claim_tenancy(requirements: &[NodeSelectorRequirementWithMinValues]) -> &'static str {
    let allows_default = requirements
        .iter()
        .filter(|r| r.key == AWS_INSTANCE_TENANCY_LABEL)
        .all(|r| match r.operator {
            Operator::In => r.values.iter().any(|v| v == DEFAULT),
            Operator::NotIn => !r.values.iter().any(|v| v == DEFAULT),
            // DoesNotExist cannot be met by any instance type (each has the label); the launch fails elsewhere.
            _ => true,
        });
    if allows_default { DEFAULT } else { DEDICATED }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(operator: Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues {
            key: AWS_INSTANCE_TENANCY_LABEL.into(),
            operator,
            values: values.iter().map(|v| (*v).to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn only_a_claim_that_rules_out_default_tenancy_launches_dedicated() {
        assert_eq!(claim_tenancy(&[]), DEFAULT);
        assert_eq!(
            claim_tenancy(&[requirement(Operator::In, &[DEDICATED])]),
            DEDICATED
        );
        assert_eq!(
            claim_tenancy(&[requirement(Operator::NotIn, &[DEFAULT])]),
            DEDICATED
        );
        assert_eq!(
            claim_tenancy(&[requirement(Operator::In, &[DEFAULT, DEDICATED])]),
            DEFAULT,
            "both allowed: shared hardware, the cheaper"
        );
        assert_eq!(claim_tenancy(&[requirement(Operator::In, &[DEFAULT])]), DEFAULT);
        assert_eq!(claim_tenancy(&[requirement(Operator::Exists, &[])]), DEFAULT);
        // Narrowed by a second requirement on the same key (a pod's on top of the NodePool's).
        assert_eq!(
            claim_tenancy(&[
                requirement(Operator::In, &[DEFAULT, DEDICATED]),
                requirement(Operator::In, &[DEDICATED]),
            ]),
            DEDICATED
        );
    }
}
