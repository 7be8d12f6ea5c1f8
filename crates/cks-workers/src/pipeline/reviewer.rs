//! The Reviewer: one verdict on one object's finding, committed as a `ReasoningNode` linked to the
//! object (`supports` when approved, `refutes` when rejected), with the object's transition to
//! `resolved` or `needs_research`. A rejected finding stays out of the synthesis; unlike the
//! reference, a rejection does not send the object back to the Researcher, which (its content
//! being unchanged) would only find its own finding again and loop. Once every object of the run is
//! reviewed, the synthesis of the approved ones is queued.

use serde_json::{Value, json};

use cks_runtime::pipeline_runs::WorkStatus;

use super::{Failure, Job, Produced, content_hash, link, node, pretty, shown};
use cks_tools::services::pipeline::{Payload, Step};

const SYSTEM: &str = "You are the review step of a pipeline that improves a knowledge graph. You are shown one \
object of the graph and a finding the research step wrote about it. Approve the finding if it is accurate, \
specific and about this object; reject it otherwise. Begin your answer with the word APPROVE or the word REJECT, \
then a colon and one sentence saying why.";

pub(super) async fn review(job: &Job<'_>) -> Result<(), Failure> {
    let object_id = job.unit.clone();
    let Some(finding_id) = job.payload.reasoning_node_id.clone() else {
        return Err(job.give_up("the task names no finding ('reasoning_node_id')".into()));
    };
    let (looked, finding) = (object_id.clone(), finding_id.clone());
    let found = job
        .read(move |s| {
            let object = s.get(&looked)?.clone();
            let hash = content_hash(&object);
            let verdict_id = format!("review-{looked}-{}", &hash[..12]);
            let earlier = s.get(&verdict_id).map(|v| v.structure.get("approved").and_then(Value::as_bool));
            let finding = s.get(&finding).map(|f| f.structure.get("content").cloned().unwrap_or(Value::Null));
            Some((object, hash, verdict_id, earlier, finding))
        })
        .await?;
    let Some((object, hash, verdict_id, earlier, finding)) = found else {
        return Err(job.give_up(format!("object '{object_id}' is no longer in session '{}'", job.session())));
    };
    if let Some(approved) = earlier {
        let note = Some("an earlier verdict on the same content was reused".to_owned());
        let approved = Some(approved.unwrap_or(false));
        job.done(Produced { outputs: vec![verdict_id], approved, note, ..Produced::default() }).await?;
        return queue_synthesis(job).await;
    }
    let Some(finding) = finding else {
        return Err(job.give_up(format!("finding '{finding_id}' is no longer in session '{}'", job.session())));
    };
    let prompt = format!(
        "The object:\n{}\n\nThe finding about it:\n{}\n\nApprove or reject the finding.",
        pretty(&shown(&object)),
        finding.as_str().map_or_else(|| finding.to_string(), str::to_owned)
    );
    let answer = job.ask(SYSTEM, prompt, job.config.reviewer_max_tokens).await?;
    let (approved, reason) = verdict(&answer.text);
    let mut structure = job.stamp("review_verdict", Some(&answer));
    structure.insert("approved".into(), json!(approved));
    structure.insert("reason".into(), json!(reason));
    structure.insert("object_id".into(), json!(object_id));
    structure.insert("finding_id".into(), json!(finding_id));
    let (meaning, status) = if approved { ("supports", "resolved") } else { ("refutes", "needs_research") };
    let name = format!("Review verdict for {}", object.identity.name);
    let operations = vec![
        node(&verdict_id, "ReasoningNode", &name, structure),
        link(&verdict_id, &object_id, meaning),
        job.transition(&object, "reviewed", status, Some(&verdict_id), &hash),
    ];
    let version_id = job.commit(operations, Some(&answer)).await?;
    let produced = Produced { approved: Some(approved), ..Produced::answered(vec![verdict_id], version_id, &answer) };
    job.done(produced).await?;
    queue_synthesis(job).await
}

/// A verdict from the model's answer: approved or not, and why. An answer that starts with
/// neither word is a rejection (nothing unclear is approved).
pub(super) fn verdict(answer: &str) -> (bool, String) {
    let text = answer.trim().trim_start_matches(|c: char| !c.is_alphanumeric());
    let word: String = text.chars().take_while(|c| c.is_alphabetic()).collect();
    let reason = |rest: &str| {
        let rest = rest.trim_start_matches(|c: char| !c.is_alphanumeric()).trim();
        if rest.is_empty() { text.trim().to_owned() } else { rest.to_owned() }
    };
    match word.to_ascii_uppercase().as_str() {
        "APPROVE" | "APPROVED" => (true, reason(&text[word.len()..])),
        "REJECT" | "REJECTED" => (false, reason(&text[word.len()..])),
        _ => {
            let shown: String = answer.trim().chars().take(200).collect();
            (false, format!("the verdict was neither APPROVE nor REJECT, so it counts as a rejection: {shown}"))
        }
    }
}

/// Queues the synthesis once every object of the run has its verdict.
async fn queue_synthesis(job: &Job<'_>) -> Result<(), Failure> {
    let work = job.run_work().await?;
    let verdict_of = |object: &String| {
        work.iter()
            .find(|w| w.step == Step::Reviewer.name() && &w.unit == object && w.status == WorkStatus::Completed)
            .map(|w| w.approved == Some(true))
    };
    let mut approved = Vec::new();
    for object in &job.run.object_ids {
        match verdict_of(object) {
            None => return Ok(()),
            Some(true) => approved.push(object.clone()),
            Some(false) => {}
        }
    }
    job.next(Step::Synthesizer, "", Payload { object_ids: approved, ..Payload::default() }).await
}
