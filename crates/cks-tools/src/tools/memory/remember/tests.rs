use super::*;

#[test]
fn observed_times_read_rfc_3339_or_a_date() {
    assert_eq!(observed_at(Some("2026-05-01T12:30:00+02:00")).unwrap(), "2026-05-01T12:30:00+02:00");
    assert_eq!(observed_at(Some("2026-05-01")).unwrap(), "2026-05-01T00:00:00Z");
    assert_eq!(observed_at(Some("last May")).unwrap_err().code, ErrorCode::InvalidParameter);
    assert!(observed_at(None).unwrap().ends_with('Z'));
    let e = episode("Alice moved.", None, "2026-05-01T00:00:00Z".into());
    assert!(e.id.starts_with("episode-") && e.id.len() == "episode-".len() + 12);
    assert_eq!((e.name.as_str(), e.content_hash.len()), ("Alice moved.", 64));
}

#[test]
fn long_texts_split_after_paragraphs_then_sentences() {
    let text = "First paragraph, short.\n\nSecond one. It has two sentences.\n\nThird.";
    assert_eq!(split(text, 1000), [text]);
    assert_eq!(split(text, 40), ["First paragraph, short.", "Second one. It has two sentences.", "Third."]);
    assert_eq!(split("One. Two. Three.", 10), ["One. Two.", "Three."]);
    assert_eq!(split("abcdefghij", 4), ["abcd", "efgh", "ij"], "no place to cut: cut anyway");
    let long = "é".repeat(25);
    assert!(split(&long, 10).iter().all(|p| p.chars().count() <= 10), "characters, not bytes");
    assert!(split("  \n ", 10).is_empty());
}

mod with_a_model {
    use serde_json::{Value, json};

    use crate::testing::{TEST_KEY, call, llm_context, llm_env, obj, rel, session, structure};
    use cks_testkit::{Provider, ProviderServer, Reply};

    const TEXT: &str = "Alice moved from Oslo to Bergen in May; she now leads the data team.";

    fn answer() -> Value {
        json!({
            "entities": [
                {"name": "Alice", "type": "Person", "attributes": {"title": "team lead"}},
                {"name": "Oslo", "type": "City"},
                {"name": "Bergen", "type": "City"},
                {"name": "data team", "type": "Team"}
            ],
            "facts": [
                {"subject": "Alice", "predicate": "lives_in", "object": "Bergen", "single_valued": true,
                 "statement": "Alice moved from Oslo to Bergen in May.", "valid_from": "May"},
                {"subject": "Alice", "predicate": "leads", "object": "data team", "single_valued": true}
            ]
        })
    }

    fn graph() -> Value {
        structure(vec![
            obj("alice", "Person", "Alice", json!({"title": "engineer"})),
            obj("oslo", "City", "Oslo", json!({})),
            rel("alice-lives-in-oslo", &["alice", "oslo"], "lives_in"),
        ])
    }

    fn ids(list: &Value) -> Vec<&str> {
        list.as_array().map(|l| l.iter().filter_map(|i| i["id"].as_str()).collect()).unwrap_or_default()
    }

    /// The same text through each wire format: known entities matched, new ones created, the
    /// old home ended, one version, the schema asked for the provider's way.
    #[tokio::test]
    async fn a_text_about_known_and_new_entities_through_each_provider() {
        for provider in ["anthropic", "openai_compatible", "google", "ollama"] {
            let server = ProviderServer::start().await;
            let ctx = llm_context(&llm_env(provider, &server.base_url()));
            let id = session(&ctx, graph()).await;
            server.push(Reply::Json(answer()));
            let result =
                call(&ctx, "remember", json!({"session_id": id, "text": TEXT, "observed_at": "2026-05-20"})).await;
            assert!(result.get("error").is_none(), "{provider}: {result}");
            assert_eq!(ids(&result["matched"]), ["alice", "oslo"], "{provider}");
            assert_eq!(ids(&result["created"]), ["bergen", "data-team"], "{provider}");
            assert_eq!(result["superseded"], json!([{"id": "alice-lives-in-oslo", "by": "alice-lives-in-bergen"}]));
            assert_eq!(result["updated"], json!([{"id": "alice", "fields": ["title"]}]));
            assert_eq!(result["already_remembered"], false);
            let text = result.to_string();
            assert!(!text.contains(TEST_KEY), "{provider}: the key never shows");

            let episode = result["episode_id"].as_str().unwrap().to_owned();
            let (old, new, episode_text) = ctx
                .runtime
                .read(&id, |s, _| {
                    (
                        s.get("alice-lives-in-oslo").unwrap().structure.get("valid_until").cloned(),
                        s.get("alice-lives-in-bergen").unwrap().structure.get("supersedes").cloned(),
                        s.get(&episode).unwrap().structure.get("text").cloned(),
                    )
                })
                .await
                .unwrap();
            assert_eq!(old, Some(json!("2026-05-20T00:00:00Z")));
            assert_eq!(new, Some(json!(["alice-lives-in-oslo"])));
            assert_eq!(episode_text, Some(json!(TEXT)));
            assert_eq!(ctx.runtime.info(&id).await.unwrap().version_count, 2, "{provider}: one commit");
            let versions = ctx.runtime.list_versions(&id).await.unwrap();
            assert_eq!(versions.last().unwrap().metadata["episode_id"], json!(episode));

            let requests = server.requests();
            assert_eq!(requests.len(), 1, "{provider}");
            let body = &requests[0].body;
            let asked = match requests[0].provider {
                Some(Provider::Anthropic) => body["tool_choice"]["name"] == "knowledge_extraction",
                Some(Provider::OpenAi) => body["response_format"]["json_schema"]["name"] == "knowledge_extraction",
                Some(Provider::Gemini) => {
                    body["generationConfig"]["responseJsonSchema"]["properties"]["facts"].is_object()
                }
                Some(Provider::Ollama) => body["format"]["properties"]["entities"].is_object(),
                None => false,
            };
            assert!(asked, "{provider}: the schema is asked for the provider's way: {body}");

            // The same text again: nothing changes.
            let again = call(&ctx, "remember", json!({"session_id": id, "text": TEXT})).await;
            assert_eq!(
                (again["already_remembered"].as_bool(), again["episode_id"].as_str()),
                (Some(true), Some(episode.as_str()))
            );
            assert_eq!(server.requests().len(), 1, "no second model call");
        }
    }

    #[tokio::test]
    async fn an_unusable_answer_is_retried_once_with_the_reason_then_refused() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("ollama", &server.base_url()));
        let id = session(&ctx, graph()).await;
        // A local model that ignores the schema and forgets an entity, then gets it right.
        server.push(Reply::Text("Sure: {\"entities\": [{\"name\": \"Alice\", \"type\": \"Person\"}], \"facts\": [{\"subject\": \"Alice\", \"predicate\": \"knows\", \"object\": \"Bob\"}]}".into()));
        server.push(Reply::Json(
            json!({"entities": [{"name": "Alice", "type": "Person"}, {"name": "Bob", "type": "Person"}],
                                       "facts": [{"subject": "Alice", "predicate": "knows", "object": "Bob"}]}),
        ));
        let result = call(&ctx, "remember", json!({"session_id": id, "text": "Alice knows Bob."})).await;
        assert_eq!(ids(&result["created"]), ["bob"], "{result}");
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        let retry = requests[1].body["messages"].to_string();
        assert!(retry.contains("names 'Bob', which is not one of the entities"), "the reason goes back: {retry}");

        // Two unusable answers: refused with the reason, nothing stored.
        server.push(Reply::Text("I cannot help with that.".into()));
        server.push(Reply::Text("{\"entities\": [{\"name\": \"\", \"type\": \"Person\"}]}".into()));
        let before = ctx.runtime.info(&id).await.unwrap().version_count;
        let refused = call(&ctx, "remember", json!({"session_id": id, "text": "Something else entirely."})).await;
        assert_eq!(refused["error"], "llm_output_parse_error", "{refused}");
        assert!(refused["message"].as_str().unwrap().contains("entities[0] has no name"));
        assert_eq!(ctx.runtime.info(&id).await.unwrap().version_count, before, "nothing stored");
    }

    #[tokio::test]
    async fn an_ambiguous_entity_is_queued_for_review_not_guessed() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let id = session(
            &ctx,
            structure(vec![
                obj("j1", "Person", "John Smith", json!({"employer": "Acme"})),
                obj("j2", "Person", "John Smith", json!({"employer": "Initech"})),
            ]),
        )
        .await;
        server.push(Reply::Json(json!({"entities": [{"name": "John Smith", "type": "Person"}]})));
        let result = call(&ctx, "remember", json!({"session_id": id, "text": "John Smith called."})).await;
        assert!(result["matched"].as_array().unwrap().is_empty(), "{result}");
        assert_eq!(result["review"], json!([{"id": "john-smith", "candidates": ["j1", "j2"]}]));
        assert_eq!(result["review_task_ids"].as_array().unwrap().len(), 2);
        let tasks = call(&ctx, "claim_conflict_task", json!({"task_type": "duplicate_candidate"})).await;
        let pair = &tasks["task"]["payload"]["object_ids"];
        assert!(pair == &json!(["j1", "john-smith"]) || pair == &json!(["j2", "john-smith"]), "{tasks}");
    }

    #[tokio::test]
    async fn an_episode_answers_what_it_added_and_forgetting_it_undoes_it() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("google", &server.base_url()));
        let id = session(&ctx, graph()).await;
        let before = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
        server.push(Reply::Json(answer()));
        let result = call(&ctx, "remember", json!({"session_id": id, "text": TEXT, "source": "chat with Alice"})).await;
        let episode = result["episode_id"].as_str().unwrap();

        // Where did we learn it: the episode's neighbourhood.
        let around =
            call(&ctx, "query_subgraph", json!({"session_id": id, "seed_ids": [episode], "max_depth": 1})).await;
        let text = around.to_string();
        for added in ["bergen", "data-team", "alice-lives-in-bergen"] {
            assert!(text.contains(added), "{added} in {around}");
        }

        let forgotten = call(&ctx, "forget_episode", json!({"session_id": id, "episode_id": episode})).await;
        assert!(forgotten.get("error").is_none(), "{forgotten}");
        assert_eq!(forgotten["restored"], json!(["alice", "alice-lives-in-oslo"]));
        let after = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
        assert!(after.same_content(&before), "the graph is as it was before the text");
        let missing = call(&ctx, "forget_episode", json!({"session_id": id, "episode_id": episode})).await;
        assert_eq!(missing["error"], "object_not_found");
    }

    #[tokio::test]
    async fn a_long_text_goes_in_part_by_part_and_a_failed_part_is_said_and_resumed() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("openai_compatible", &server.base_url()));
        let id = session(&ctx, structure(vec![])).await;
        let paragraph = |who: &str| format!("{who} works at Acme. {}", "Filler words about the work. ".repeat(200));
        let text = [paragraph("Ann"), paragraph("Ben"), paragraph("Cat")].join("\n\n");
        let person = |who: &str| {
            Reply::Json(json!({"entities": [{"name": who, "type": "Person"}, {"name": "Acme", "type": "Company"}],
                               "facts": [{"subject": who, "predicate": "works_at", "object": "Acme"}]}))
        };
        server.push_all([person("Ann"), person("Ben"), Reply::text("no"), Reply::text("still no")]);
        let failed = call(&ctx, "remember", json!({"session_id": id, "text": text})).await;
        assert_eq!(failed["error"], "llm_output_parse_error", "{failed}");
        assert_eq!((failed["parts"].as_u64(), failed["parts_done"].as_u64()), (Some(3), Some(2)));
        assert!(failed["message"].as_str().unwrap().contains("Parts 1 to 2 of 3 are remembered"));
        let versions = ctx.runtime.info(&id).await.unwrap().version_count;
        assert_eq!(versions, 3, "two parts committed, one each");

        // The same text again goes on from part 3; then it is complete.
        server.push(person("Cat"));
        let done = call(&ctx, "remember", json!({"session_id": id, "text": text})).await;
        assert_eq!(done["parts"], 3, "{done}");
        assert_eq!(ids(&done["created"]), ["cat"], "only the last part was read again");
        assert_eq!(ids(&done["matched"]), ["acme"]);
        assert_eq!(server.requests().len(), 5);
        let again = call(&ctx, "remember", json!({"session_id": id, "text": text})).await;
        assert_eq!(again["already_remembered"], true);
        let staff = ctx.runtime.read(&id, |s, _| s.relations_of_type("works_at").len()).await.unwrap();
        assert_eq!(staff, 3);
    }
}
