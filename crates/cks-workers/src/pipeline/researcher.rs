//! The Researcher: one finding about one object, committed as a `ReasoningNode` linked to the
//! object (`supports`), with the object's transition to `awaiting_review`; then the object's review
//! is queued.

use serde_json::json;

use super::{Failure, Job, Produced, content_hash, link, neighbourhood, node, pretty, shown};
use cks_tools::services::pipeline::{Payload, Step};

const SYSTEM: &str = "You are the research step of a pipeline that improves a knowledge graph. You are shown one \
object of the graph (its id, type, name and fields) and what it is related to. Write one finding about the object \
that a reviewer could check against sources: a fact, a qualification or a correction, in one to three plain \
sentences. No heading, no list, no formatting, nothing but the finding.";

pub(super) async fn research(job: &Job<'_>) -> Result<(), Failure> {
    let object_id = job.unit.clone();
    let looked = object_id.clone();
    let found = job
        .read(move |s| {
            let object = s.get(&looked)?.clone();
            let hash = content_hash(&object);
            let finding_id = format!("research-{looked}-{}", &hash[..12]);
            let earlier = s.contains(&finding_id);
            let context = neighbourhood(s, std::slice::from_ref(&looked), 1);
            Some((object, hash, finding_id, earlier, context))
        })
        .await?;
    let Some((object, hash, finding_id, earlier, context)) = found else {
        return Err(job.give_up(format!("object '{object_id}' is no longer in session '{}'", job.session())));
    };
    if earlier {
        // This very content was researched before (an earlier attempt, or another run): reuse it.
        let note = Some("an earlier finding about the same content was reused".to_owned());
        job.done(Produced { outputs: vec![finding_id.clone()], note, ..Produced::default() }).await?;
        return queue_review(job, &object_id, &finding_id).await;
    }
    let prompt = format!(
        "The object:\n{}\n\nWhat it is related to:\n{}\n\nWrite the finding.",
        pretty(&shown(&object)),
        pretty(&json!(context))
    );
    let answer = job.ask(SYSTEM, prompt, job.config.researcher_max_tokens).await?;
    let finding = answer.text.trim();
    if finding.is_empty() {
        return Err(job.retry("the model's finding was empty".into()));
    }
    let mut structure = job.stamp("research_finding", Some(&answer));
    structure.insert("content".into(), json!(finding));
    structure.insert("object_id".into(), json!(object_id));
    let name = format!("Research finding for {}", object.identity.name);
    let operations = vec![
        node(&finding_id, "ReasoningNode", &name, structure),
        link(&finding_id, &object_id, "supports"),
        job.transition(&object, "researched", "awaiting_review", Some(&finding_id), &hash),
    ];
    let version_id = job.commit(operations, Some(&answer)).await?;
    job.done(Produced::answered(vec![finding_id.clone()], version_id, &answer)).await?;
    queue_review(job, &object_id, &finding_id).await
}

async fn queue_review(job: &Job<'_>, object_id: &str, finding_id: &str) -> Result<(), Failure> {
    let payload = Payload {
        object_id: Some(object_id.to_owned()),
        reasoning_node_id: Some(finding_id.to_owned()),
        ..Payload::default()
    };
    job.next(Step::Reviewer, object_id, payload).await
}
