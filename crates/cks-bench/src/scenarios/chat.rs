//! The `ai_chat` measurements: one turn at a time, and many turns at once beside queries.

use super::*;

impl Bench<'_> {
    /// An `ai_chat` turn of three iterations (tool call, tool call, text) against a local
    /// provider server that answers at once.
    pub(super) async fn ai_chat(&mut self, tools: Option<Vec<String>>) -> anyhow::Result<()> {
        let size = Some(self.plan.small_objects);
        let names = [
            ("ai_chat_turn_p50", "ms"),
            ("ai_chat_turn_p99", "ms"),
            ("ai_chat_turn_server_p50", "ms"),
            ("ai_chat_turn_server_p99", "ms"),
        ];
        let mut done = HashSet::new();
        let provider = ProviderServer::start().await;
        let base_url = provider.base_url();
        let openai_url = format!("{base_url}/v1");
        let provider_name = self.plan.ai_provider.clone();
        let command = self.command.clone().with_env(&[
            ("CKS_LLM_PROVIDER", &provider_name),
            ("ANTHROPIC_API_KEY", "bench"),
            ("ANTHROPIC_BASE_URL", &base_url),
            ("CKS_OPENAI_API_KEY", "bench"),
            ("CKS_OPENAI_BASE_URL", &openai_url),
        ]);
        if let Some(tools) = &tools
            && !tools.iter().any(|t| t == "ai_chat")
        {
            for (name, unit) in names {
                self.rec.status(name, size, unit, "not available");
            }
            return Ok(());
        }
        let result: Result<(), Stop> = async {
            let (mut client, _dir, session, _, _) =
                self.session_server(&command, "ai_chat", self.plan.small_objects, "ai_chat_turn_p50").await?;
            let listed = client.list_tools().await.or_stop("ai_chat_turn_p50", "ms")?;
            if !listed.iter().any(|t| t == "ai_chat") {
                client.shutdown(GRACE).await;
                for (name, unit) in names {
                    self.rec.status(name, size, unit, "not available");
                    done.insert(name);
                }
                return Ok(());
            }
            let mut samples = Vec::new();
            let mut server_samples = Vec::new();
            for turn in 0..=self.plan.ai_turns {
                provider.clear_requests();
                provider.push_all([
                    Reply::ToolCalls(vec![ToolCall::new(
                        "query_subgraph",
                        json!({"session_id": session, "seed_ids": ["n0"], "depth": 1}),
                    )]),
                    Reply::ToolCalls(vec![ToolCall::new("list_versions", json!({"session_id": session}))]),
                    Reply::text("The graph holds sample concepts linked by five relation types."),
                ]);
                let started = Instant::now();
                let answer = client
                    .call_tool("ai_chat", json!({"session_id": session, "prompt": "Summarise the graph around n0."}))
                    .await;
                let elapsed = started.elapsed();
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new("ai_chat_turn_p50", "ms", e));
                    }
                };
                let tool_calls = answer["tool_calls"].as_array().map_or(0, Vec::len);
                if answer["reply"].as_str().is_none() || provider.pending() != 0 || tool_calls != 2 {
                    client.kill().await;
                    let message = format!(
                        "ai_chat turn did not take 3 iterations ({} replies unused, {tool_calls} tool calls): {}",
                        provider.pending(),
                        crate::client::truncate(&answer.to_string(), 300)
                    );
                    return Err(Stop::new("ai_chat_turn_p50", "ms", CallError::Failed(message)));
                }
                if turn > 0 {
                    // The provider's own time (body read, checks, rendering) for the three LLM calls.
                    let provider_time: Duration =
                        provider.requests().iter().filter_map(|r| Some(r.answered_at? - r.received_at)).sum();
                    samples.push(ms(elapsed));
                    server_samples.push(ms(elapsed.saturating_sub(provider_time)));
                }
            }
            let note = Some(format!(
                "{} turns after one warm-up; provider: cks-testkit {provider_name}, answering at once; client-observed, so \
                 it includes the three loopback HTTP round trips to the provider and its own handling",
                samples.len()
            ));
            self.rec.value("ai_chat_turn_p50", size, "ms", quantile(&samples, 0.5), note);
            self.rec.value("ai_chat_turn_p99", size, "ms", quantile(&samples, 0.99), None);
            let note = Some(
                "each turn's client-observed time minus the provider server's own time for its three requests (from \
                 a request's head arriving to its answer being rendered); what remains is the MCP server's work, the \
                 stdio round trip and the loopback HTTP transfers"
                    .to_owned(),
            );
            self.rec.value("ai_chat_turn_server_p50", size, "ms", quantile(&server_samples, 0.5), note);
            self.rec.value("ai_chat_turn_server_p99", size, "ms", quantile(&server_samples, 0.99), None);
            done.extend(["ai_chat_turn_p50", "ai_chat_turn_p99", "ai_chat_turn_server_p50", "ai_chat_turn_server_p99"]);
            client.shutdown(GRACE).await;
            Ok(())
        }
        .await;
        self.finish(result, &names, &mut done, size);
        Ok(())
    }

    /// `concurrent_chats` `ai_chat` turns sent at once over the one stdio connection, against a
    /// provider whose every answer takes 200 ms and asks for one more `query_subgraph`, with the
    /// iteration cap at 3: each turn makes exactly three 200 ms LLM calls, so the whole batch takes
    /// about 600 ms when waiting on the provider never blocks the server. Meanwhile (once all are
    /// sent) `queries_during_chats` sequential `query_subgraph` calls on another session.
    pub(super) async fn ai_chat_concurrent(&mut self, tools: Option<Vec<String>>) -> anyhow::Result<()> {
        const LLM_DELAY: Duration = Duration::from_millis(200);
        const ITERATIONS: usize = 3;
        let size = Some(self.plan.small_objects);
        let names =
            [("ai_chat_50_concurrent_wall", "ms"), ("query_during_chats_p50", "ms"), ("query_during_chats_p99", "ms")];
        let mut done = HashSet::new();
        if let Some(tools) = &tools
            && !tools.iter().any(|t| t == "ai_chat")
        {
            for (name, unit) in names {
                self.rec.status(name, size, unit, "not available");
            }
            return Ok(());
        }
        let provider = ProviderServer::start().await;
        provider.set_default(Some(Reply::Delay(
            LLM_DELAY,
            Box::new(Reply::ToolCalls(vec![ToolCall::new("query_subgraph", json!({"seed_ids": ["n0"], "depth": 1}))])),
        )));
        let base_url = provider.base_url();
        let openai_url = format!("{base_url}/v1");
        let provider_name = self.plan.ai_provider.clone();
        let iterations = ITERATIONS.to_string();
        let command = self.command.clone().with_env(&[
            ("CKS_LLM_PROVIDER", &provider_name),
            ("ANTHROPIC_API_KEY", "bench"),
            ("ANTHROPIC_BASE_URL", &base_url),
            ("CKS_OPENAI_API_KEY", "bench"),
            ("CKS_OPENAI_BASE_URL", &openai_url),
            ("CKS_AI_CHAT_MAX_ITERATIONS", &iterations),
        ]);
        let plan = self.plan.clone();
        let first = "ai_chat_50_concurrent_wall";
        let result: Result<(), Stop> = async {
            let (mut client, _dir, chat_session, _, _) =
                self.session_server(&command, "ai_chat_concurrent", plan.small_objects, first).await?;
            let prepared = async {
                let listed = client.list_tools().await?;
                if !listed.iter().any(|t| t == "ai_chat") {
                    return Ok(None);
                }
                // A second session for the queries.
                let created = client.call_tool("validate_knowledge", json!({"json_data": sample_json(plan.small_objects)})).await?;
                Ok(Some(created_session(&created)?.0))
            }
            .await;
            let query_session = match prepared {
                Ok(Some(session)) => session,
                Ok(None) => {
                    client.shutdown(GRACE).await;
                    for (name, unit) in names {
                        self.rec.status(name, size, unit, "not available");
                        done.insert(name);
                    }
                    return Ok(());
                }
                Err(e) => {
                    client.kill().await;
                    return Err(Stop::new(first, "ms", e));
                }
            };
            let client = client.into_concurrent();
            let timeout = plan.call_timeout;
            let chat_args =
                json!({"session_id": chat_session, "prompt": "Walk the graph around n0 as far as you can."});
            let query_args = json!({"session_id": query_session, "seed_ids": ["n0"], "depth": 2, "max_objects": 50});
            // Warm-up: one turn (the provider connection) and a few queries, untimed.
            let warmed = async {
                client.call_tool("ai_chat", chat_args.clone(), timeout).await?;
                for _ in 0..10 {
                    client.call_tool("query_subgraph", query_args.clone(), timeout).await?;
                }
                Ok::<(), CallError>(())
            }
            .await;
            if let Err(e) = warmed {
                client.kill().await;
                return Err(Stop::new(first, "ms", e));
            }
            provider.clear_requests();

            let started = Instant::now();
            let mut in_flight: Vec<InFlight> = Vec::with_capacity(plan.concurrent_chats);
            for _ in 0..plan.concurrent_chats {
                match client.send_tool_call("ai_chat", chat_args.clone()).await {
                    Ok(call) => in_flight.push(call),
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new(first, "ms", e));
                    }
                }
            }
            let sent = started.elapsed();
            // The turns' completion, awaited on their own task so the queries below do not delay it.
            let chats = tokio::spawn(async move {
                let mut answers = Vec::with_capacity(in_flight.len());
                for call in in_flight {
                    answers.push(call.wait(timeout).await);
                }
                (started.elapsed(), answers)
            });
            let mut samples = Vec::with_capacity(plan.queries_during_chats);
            let mut query_failure = None;
            for _ in 0..plan.queries_during_chats {
                let t = Instant::now();
                match client.call_tool("query_subgraph", query_args.clone(), timeout).await {
                    Ok(_) => samples.push(ms(t.elapsed())),
                    Err(e) => {
                        query_failure = Some(e);
                        break;
                    }
                }
            }
            let queries_done = started.elapsed();
            let (wall, answers) = match chats.await {
                Ok(joined) => joined,
                Err(e) => {
                    client.kill().await;
                    return Err(Stop::new(first, "ms", CallError::Failed(format!("the waiting task failed: {e}"))));
                }
            };
            let llm_calls = provider.requests().len();
            let mut capped = 0;
            for answer in answers {
                match answer {
                    Ok(answer) => {
                        if answer["truncation_reason"] == "max_iterations" {
                            capped += 1;
                        }
                    }
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new(first, "ms", e));
                    }
                }
            }
            let expected = plan.concurrent_chats * ITERATIONS;
            if llm_calls != expected {
                // A server that ignores the iteration cap makes more LLM calls per turn: its wall
                // time measures other work, so it is kept as a status, not compared.
                let status = format!(
                    "not comparable: {:.0} ms for {llm_calls} LLM calls, not {expected} (the server does not cap turns \
                     at CKS_AI_CHAT_MAX_ITERATIONS={ITERATIONS})",
                    ms(wall)
                );
                self.rec.status(first, size, "ms", status);
            } else {
                let note = Some(format!(
                "{} turns sent at once on one connection (all written in {:.1} ms), each {ITERATIONS} LLM calls of {} ms \
                 (cks-testkit {provider_name}, CKS_AI_CHAT_MAX_ITERATIONS={ITERATIONS}; {capped} turns ended at the cap); \
                 ideal {} ms",
                plan.concurrent_chats,
                ms(sent),
                LLM_DELAY.as_millis(),
                ITERATIONS as u128 * LLM_DELAY.as_millis()
            ));
                self.rec.value("ai_chat_50_concurrent_wall", size, "ms", ms(wall), note);
            }
            done.insert("ai_chat_50_concurrent_wall");
            if let Some(e) = query_failure {
                client.kill().await;
                return Err(Stop::new("query_during_chats_p50", "ms", e));
            }
            let note = Some(format!(
                "{} sequential calls (depth 2, max_objects 50) on another session of the same connection, started once \
                 the turns were sent; the last answered {:.0} ms after the first turn was sent",
                samples.len(),
                ms(queries_done)
            ));
            self.rec.value("query_during_chats_p50", size, "ms", quantile(&samples, 0.5), note);
            self.rec.value("query_during_chats_p99", size, "ms", quantile(&samples, 0.99), None);
            done.extend(["query_during_chats_p50", "query_during_chats_p99"]);
            client.shutdown(GRACE).await;
            Ok(())
        }
        .await;
        self.finish(result, &names, &mut done, size);
        Ok(())
    }
}
