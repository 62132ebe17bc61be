//! The quota tree as it is drawn: each top quota (no parent among those
//! listed) by name, each followed by its children by name, depth first,
//! with the prefix that draws its branch (`├─ `, `└─ `, `│  `).

use std::collections::BTreeMap;

use koord_queue_visibility::types::QuotaUsage;

/// `quotas` in tree order: each top quota (no parent among them) by name,
/// each followed by its children by name, depth first.
pub fn tree_order(quotas: Vec<QuotaUsage>) -> Vec<QuotaUsage> {
    tree(&quotas).into_iter().map(|(q, _)| q.clone()).collect()
}

/// Each quota with the prefix that draws its place in the tree.
pub fn tree(quotas: &[QuotaUsage]) -> Vec<(&QuotaUsage, String)> {
    let names: Vec<&str> = quotas.iter().map(|q| q.metadata.name.as_str()).collect();
    let mut children: BTreeMap<Option<&str>, Vec<&QuotaUsage>> = BTreeMap::new();
    for q in quotas {
        let parent = q.parent.as_deref().filter(|p| names.contains(p));
        children.entry(parent).or_default().push(q);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    }
    let mut out = Vec::new();
    let mut stack: Vec<(&QuotaUsage, String, String)> = Vec::new();
    for top in children.get(&None).into_iter().flatten().rev() {
        stack.push((top, String::new(), String::new()));
    }
    while let Some((q, prefix, indent)) = stack.pop() {
        if out
            .iter()
            .any(|(o, _): &(&QuotaUsage, String)| o.metadata.name == q.metadata.name)
        {
            continue; // a cycle among the quotas
        }
        out.push((q, prefix));
        let kids: &[&QuotaUsage] = children
            .get(&Some(q.metadata.name.as_str()))
            .map_or(&[], Vec::as_slice);
        let n = kids.len();
        for (i, kid) in kids.iter().enumerate().rev() {
            let last = i + 1 == n;
            let branch = if last { "└─ " } else { "├─ " };
            let more = if last { "   " } else { "│  " };
            stack.push((kid, format!("{indent}{branch}"), format!("{indent}{more}")));
        }
    }
    out
}
