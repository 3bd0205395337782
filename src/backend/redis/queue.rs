//! Deploy queues on Redis (issue 44): what the scripts need of a request's
//! fields, the markers a waiter reads when it left the line, the holder's
//! cancel listener, and the key's mark.
//!
//! The rules run inside the queue scripts (`scripts/common.lua`: `join`,
//! `promote`, `aim_cancel`), so they cost no round trip: the field list is
//! one more `ARGV` of ENQUEUE, CHECK and RENEW, the order of a run that
//! ended with status 0 one more of RELEASE. Only what ends a request adds
//! one: a superseded waiter reads the marker naming the newer request.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::answer::NodeAnswer;
use super::line::listen;
use super::node::NodeResult;
use super::quorum::Quorum;
use super::scripts;
use crate::backend::fields::FieldList;
use crate::backend::{Acquired, LockRequest, Result, Rival};

/// The request's field list as the scripts' last argument, None when it
/// has none (then it is sent exactly as before the fields).
pub(super) fn fields_arg(request: &LockRequest) -> Option<String> {
    (!request.extras.is_empty()).then(|| request.extras.encode())
}

/// A request as a marker or a cancel notice names it: `{"s":source,"f":fields}`.
pub(super) fn rival(raw: &str) -> Rival {
    let v: serde_json::Value = serde_json::from_str(raw).unwrap_or_default();
    Rival {
        source: v["s"].as_str().unwrap_or("?").to_string(),
        identity: None,
        fields: v["f"]
            .as_str()
            .and_then(|f| FieldList::parse(f.as_bytes()).ok())
            .unwrap_or_default(),
    }
}

/// What a round of answers says of a request that does not go on: outdated
/// when any node says so (a mark only rises after a run of a higher order
/// succeeded: believing one node never runs an older version after a
/// newer one), superseded when too few nodes are left where it still waits
/// to make a majority.
pub(super) enum Ending {
    Outdated(u64),
    /// The nodes that said superseded.
    Superseded(Vec<usize>),
}

pub(super) fn ending(sh: &Quorum, said: &[Option<NodeAnswer>]) -> Option<Ending> {
    let mark = said
        .iter()
        .filter_map(|s| match s {
            Some(NodeAnswer::Outdated { mark }) => Some(*mark),
            _ => None,
        })
        .max();
    if let Some(mark) = mark {
        return Some(Ending::Outdated(mark));
    }
    let superseded: Vec<usize> = said
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Some(NodeAnswer::Superseded)))
        .map(|(i, _)| i)
        .collect();
    (!superseded.is_empty() && sh.nodes.len() - superseded.len() < sh.majority())
        .then_some(Ending::Superseded(superseded))
}

/// The outcome of an ending: a superseded request reads who superseded it
/// from the first node whose marker is still there.
pub(super) async fn outcome(sh: &Quorum, key: &str, id: &str, ending: Ending) -> Acquired {
    match ending {
        Ending::Outdated(mark) => Acquired::Outdated { mark },
        Ending::Superseded(nodes) => {
            let marker = format!("{}sup:{id}", scripts::prefix(key));
            for i in nodes {
                let got: NodeResult<Option<String>> =
                    sh.nodes[i].cmd(redis::cmd("GET").arg(&marker)).await;
                if let Ok(Some(raw)) = got {
                    return Acquired::Superseded(rival(&raw));
                }
            }
            Acquired::Superseded(Rival {
                source: "?".into(),
                ..Rival::default()
            })
        }
    }
}

/// A `--cancel-running` holder's ear: one listener per node on `P
/// cancel:ID`, where a newer `--cancel-running` request's ENQUEUE pushes
/// its name. Holders without the flag have none (no connection, no round
/// trip); a notice pushed before the listener starts waits in its list.
pub(super) fn cancel_listeners(
    sh: &Quorum,
    key: &str,
    id: &str,
) -> (JoinSet<()>, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel(8);
    let mut listeners = JoinSet::new();
    let list = format!("{}cancel:{id}", scripts::prefix(key));
    for node in &sh.nodes {
        listeners.spawn(listen(
            node.clone(),
            list.clone(),
            sh.recheck() * 2,
            tx.clone(),
        ));
    }
    (listeners, rx)
}

/// The key's mark: the highest any node that answered keeps (a node that
/// missed a raise keeps a lower one), None when none has one.
pub(super) async fn mark(sh: &Arc<Quorum>, key: &str) -> Result<Option<u64>> {
    let name = format!("{}mark", scripts::prefix(key));
    let answers: Vec<NodeResult<Option<String>>> = sh
        .all(move |node| {
            let name = name.clone();
            async move { node.cmd(redis::cmd("GET").arg(&name)).await }
        })
        .await;
    sh.need_quorum(&answers)?;
    Ok(answers
        .iter()
        .filter_map(|a| a.as_ref().ok()?.as_deref()?.parse::<u64>().ok())
        .max())
}

/// Deletes the key's mark on every node; true when one had it.
pub(super) async fn clear_mark(sh: &Arc<Quorum>, key: &str) -> Result<bool> {
    let name = format!("{}mark", scripts::prefix(key));
    let answers: Vec<NodeResult<i64>> = sh
        .all(move |node| {
            let name = name.clone();
            async move { node.cmd(redis::cmd("DEL").arg(&name)).await }
        })
        .await;
    sh.need_quorum(&answers)?;
    Ok(answers.iter().any(|a| matches!(a, Ok(n) if *n > 0)))
}

#[cfg(test)]
mod tests {
    use super::super::quorum::tests::quorum_of;
    use super::*;

    #[test]
    fn a_marker_names_the_newer_request() {
        let r = rival(r#"{"s":"build-42","f":"note=deploy 1.4.2\norder=42\nnewest=1\n"}"#);
        assert_eq!(r.source, "build-42");
        assert_eq!(r.fields.get("order"), Some("42"));
        assert_eq!(r.to_string(), "'build-42' (order 42, note 'deploy 1.4.2')");
        assert_eq!(rival("not json").source, "?");
    }

    #[test]
    fn outdated_on_any_node_superseded_where_no_majority_is_left() {
        let s = quorum_of(3, 30_000, 60_000);
        let w = Some(NodeAnswer::Waiting { ahead: 0 });
        let sup = Some(NodeAnswer::Superseded);
        let out = |mark| Some(NodeAnswer::Outdated { mark });
        assert!(matches!(
            ending(&s, &[w, out(7), out(9)]),
            Some(Ending::Outdated(9))
        ));
        assert!(ending(&s, &[w, sup, w]).is_none());
        assert!(matches!(
            ending(&s, &[sup, None, sup]),
            Some(Ending::Superseded(n)) if n == [0, 2]
        ));
        let one = quorum_of(1, 30_000, 60_000);
        assert!(matches!(ending(&one, &[sup]), Some(Ending::Superseded(_))));
        assert!(ending(&one, &[w]).is_none());
    }
}
