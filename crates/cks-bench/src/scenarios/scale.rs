//! The graph-scale measurements, and restarts against the number of stored sessions.

use super::*;

impl Bench<'_> {
    /// The graph-scale measurements at one size, each size on a server of its own (a timed-out
    /// server is killed, so the next size starts afresh). Returns why the session could not be
    /// created, when it could not ("session creation at 1000k timed out after 300 s").
    pub(super) async fn scale(&mut self, size: u64) -> anyhow::Result<Option<String>> {
        let names = SCALE_MEASUREMENTS;
        let mut done = HashSet::new();
        let command = self.command.clone();
        let plan = self.plan.clone();
        let nodes = (size / 2).max(1);
        let result: Result<(), Stop> = async {
            let (mut client, dir, session, first_version, created) =
                self.session_server(&command, &format!("scale-{size}"), size, "create_validate").await?;
            self.rec.value("create_validate", Some(size), "ms", ms(created), None);
            done.insert("create_validate");
            if let Some(kib) = client.sample_rss() {
                self.rec.value("peak_rss_create", Some(size), "MiB", kib as f64 / 1024.0, None);
                done.insert("peak_rss_create");
            }

            // One-object commits.
            let mut samples = Vec::new();
            let mut with_structure = 0;
            let loop_started = Instant::now();
            for i in 0..plan.commits {
                if !plan.another(loop_started, samples.len(), plan.commits) {
                    break;
                }
                let op = json!([{
                    "type": "update_object",
                    "object_id": format!("n{}", (i as u64 * 7_919) % nodes),
                    "structure_patch": {"bench_counter": i},
                    "mode": "merge",
                }]);
                let started = Instant::now();
                let result =
                    client.call_tool("evolve_knowledge", json!({"session_id": session, "operations": op})).await;
                let elapsed = started.elapsed();
                match result {
                    Ok(result) => {
                        samples.push(ms(elapsed));
                        if result.get("serialized").is_some() {
                            with_structure += 1;
                        }
                    }
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new("evolve_one_p50", "ms", e));
                    }
                }
            }
            let note = Some(format!(
                "{} commits; {} of them returned the serialized structure{}",
                sampled(samples.len(), plan.commits),
                with_structure,
                if with_structure == 0 { " (cks-mcp includes it only up to 2,000 objects)" } else { "" }
            ));
            self.rec.value("evolve_one_p50", Some(size), "ms", quantile(&samples, 0.5), note);
            self.rec.value("evolve_one_p95", Some(size), "ms", quantile(&samples, 0.95), None);
            done.extend(["evolve_one_p50", "evolve_one_p95"]);

            // Bounded subgraph queries from varying seeds.
            let mut samples = Vec::new();
            let loop_started = Instant::now();
            for i in 0..plan.scale_queries {
                if !plan.another(loop_started, samples.len(), plan.scale_queries) {
                    break;
                }
                let args = json!({"session_id": session, "seed_ids": [format!("n{}", (i as u64 * 104_729) % nodes)],
                    "depth": 2, "max_objects": 50});
                let started = Instant::now();
                if let Err(e) = client.call_tool("query_subgraph", args).await {
                    client.kill().await;
                    return Err(Stop::new("query_depth2_p50", "ms", e));
                }
                samples.push(ms(started.elapsed()));
            }
            let note = Some(format!("{} calls from varying seeds", sampled(samples.len(), plan.scale_queries)));
            self.rec.value("query_depth2_p50", Some(size), "ms", quantile(&samples, 0.5), note);
            done.insert("query_depth2_p50");

            let repeated: [(&'static str, &str, Value); 3] = [
                ("serialize", "serialize_knowledge", json!({"session_id": session})),
                ("list_versions", "list_versions", json!({"session_id": session})),
                (
                    "compare_versions",
                    "compare_versions",
                    json!({"session_id": session, "target_version_id": first_version}),
                ),
            ];
            for (measurement, tool, args) in repeated {
                let peak_of_serialize = measurement == "serialize" && client.start_new_peak();
                let repeats = if measurement == "list_versions" { plan.scale_queries } else { plan.repeats };
                let mut samples = Vec::new();
                let mut decoded = Vec::new();
                let mut note = None;
                let loop_started = Instant::now();
                for _ in 0..repeats.max(1) {
                    if !samples.is_empty() && !plan.another(loop_started, samples.len(), repeats) {
                        break;
                    }
                    let started = Instant::now();
                    // The server's time is until the answer's last byte arrives; it counts only
                    // once the answer is known to be no failure. This client's decoding of the
                    // line (and of the document, which it does not do) is not the server's
                    // time, but for `serialize_knowledge` is recorded as well.
                    match client.call_tool_text(tool, args.clone()).await {
                        Ok(text) => {
                            decoded.push(ms(started.elapsed()));
                            samples.push(ms(client.received_in().unwrap_or_else(|| started.elapsed())));
                            if measurement == "list_versions" {
                                let result: Value = serde_json::from_str(&text).unwrap_or_default();
                                let n = result["versions"].as_array().map_or(0, Vec::len);
                                note = Some(format!("{n} versions listed"));
                            }
                        }
                        Err(e) => {
                            client.kill().await;
                            return Err(Stop::new(measurement, "ms", e));
                        }
                    }
                }
                if repeats > 1 {
                    let runs = format!("median of {}", sampled(samples.len(), repeats));
                    note = Some(note.map_or(runs.clone(), |n| format!("{n}; {runs}")));
                }
                if measurement == "serialize" {
                    let note = Some(format!("{} calls, each until its line is decoded", decoded.len()));
                    self.rec.value("serialize_decoded", Some(size), "ms", quantile(&decoded, 0.5), note);
                    done.insert("serialize_decoded");
                }
                self.rec.value(measurement, Some(size), "ms", quantile(&samples, 0.5), note);
                done.insert(measurement);
                if peak_of_serialize && let Some(kib) = vm_hwm_kib(client.pid()) {
                    let note = Some("peak RSS while serializing (from the RSS before the first call)".into());
                    self.rec.value("peak_rss_serialize", Some(size), "MiB", kib as f64 / 1024.0, note);
                    done.insert("peak_rss_serialize");
                }
            }

            // Searched by words and meaning once every object is embedded (so the session's text
            // index is kept too): the restarts below then time the first hybrid search.
            let searchable = self.embedded(&mut client, &session).await;
            let peak = client.shutdown(GRACE).await;
            if let Some(kib) = peak {
                self.rec.value("peak_rss", Some(size), "MiB", kib as f64 / 1024.0, None);
                done.insert("peak_rss");
            }
            let on_disk = match &self.postgres {
                Some(postgres) => {
                    let url = std::fs::read_to_string(dir.join(DATABASE_URL_FILE)).unwrap_or_default();
                    postgres.database_size(&url)
                }
                None => dir_size(&dir),
            };
            self.rec.value("disk_size", Some(size), "MiB", on_disk as f64 / MIB, None);
            done.insert("disk_size");

            // Restart on the same data: time to the first successful query, the median of
            // several restarts (one start is at the mercy of whatever else the machine does).
            const RESTARTS: usize = 5;
            let started = Instant::now();
            let mut times = Vec::new();
            let mut peak_kib: Option<u64> = None;
            while self.plan.another(started, times.len(), RESTARTS) {
                let (client, elapsed) = self.restart_and_query(&command, &dir, &session, "restart_first_query").await?;
                times.push(ms(elapsed));
                peak_kib = peak_kib.max(client.shutdown(GRACE).await);
            }
            let note =
                format!("spawn → initialize → query_subgraph, median of {} restarts", sampled(times.len(), RESTARTS));
            self.rec.value("restart_first_query", Some(size), "ms", quantile(&times, 0.5), Some(note));
            done.insert("restart_first_query");
            if let Some(kib) = peak_kib {
                self.rec.value("peak_rss_restart", Some(size), "MiB", kib as f64 / 1024.0, None);
                done.insert("peak_rss_restart");
            }
            match searchable {
                Ok(()) => {
                    let started = Instant::now();
                    let mut times = Vec::new();
                    while self.plan.another(started, times.len(), RESTARTS) {
                        let search = ("search_semantic", search_args(&session));
                        let (client, elapsed) =
                            self.restart_and_call(&command, &dir, search, "restart_first_search").await?;
                        times.push(ms(elapsed));
                        client.shutdown(GRACE).await;
                    }
                    let note = format!(
                        "spawn → initialize → hybrid search_semantic, median of {} restarts",
                        sampled(times.len(), RESTARTS)
                    );
                    self.rec.value("restart_first_search", Some(size), "ms", quantile(&times, 0.5), Some(note));
                }
                Err(why) => self.rec.status("restart_first_search", Some(size), "ms", why),
            }
            done.insert("restart_first_search");
            Ok(())
        }
        .await;
        let creation_failed = match &result {
            Err(stop) if stop.measurement == "create_validate" => Some(format!(
                "session creation at {} {}",
                size_label("create_validate", Some(size)),
                outcome(&stop.status)
            )),
            _ => None,
        };
        self.finish(result, &names, &mut done, Some(size));
        Ok(creation_failed)
    }
    /// Searches `session` (a hybrid `search_semantic`) until every object has its vector, within
    /// the measurement budget; why not, when the server does not rank by meaning or the budget ran
    /// out first.
    async fn embedded(&self, client: &mut McpClient, session: &str) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let answer = client.call_tool("search_semantic", search_args(session)).await.map_err(|e| e.to_string())?;
            if answer["ranking"] != "hybrid" {
                return Err(format!("skipped: the server ranks by {}", answer["ranking"]));
            }
            if answer["embeddings"]["pending"] == 0 {
                return Ok(());
            }
            if started.elapsed() > self.plan.measurement_budget {
                return Err(format!("skipped: {} objects not embedded in time", answer["embeddings"]["pending"]));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Starts a server on existing data and times spawn → `initialize` → first successful
    /// `query_subgraph` (seed `n0`, depth 2, `max_objects` 50) on `session`. Returns the running
    /// client and the time.
    pub(super) async fn restart_and_query(
        &self,
        command: &ServerCommand,
        dir: &Path,
        session: &str,
        measurement: &'static str,
    ) -> Result<(McpClient, Duration), Stop> {
        let args = json!({"session_id": session, "seed_ids": ["n0"], "depth": 2, "max_objects": 50});
        self.restart_and_call(command, dir, ("query_subgraph", args), measurement).await
    }

    /// Starts a server on existing data and times spawn → `initialize` → first successful `call`
    /// (a tool and its arguments). Returns the running client and the time.
    async fn restart_and_call(
        &self,
        command: &ServerCommand,
        dir: &Path,
        (tool, args): (&str, Value),
        measurement: &'static str,
    ) -> Result<(McpClient, Duration), Stop> {
        let started = Instant::now();
        let mut client = self.spawn(command, dir).or_stop(measurement, "ms")?;
        let queried = async {
            client.initialize().await?;
            client.call_tool(tool, args).await
        }
        .await;
        let elapsed = started.elapsed();
        match queried {
            Ok(_) => Ok((client, elapsed)),
            Err(e) => {
                client.kill().await;
                Err(Stop::new(measurement, "ms", e))
            }
        }
    }

    /// Restart cost against the number of stored sessions: one data directory gains small
    /// sessions up to each count of `session_counts`; after each count the server is restarted
    /// three times, and spawn → `initialize` → first successful `query_subgraph` on the first
    /// session is timed (the median is recorded, with the count as the size). Then one more
    /// restart reads every stored session once, in order, and its peak RSS is recorded: memory
    /// that follows the session cache, not the number of sessions, stays flat.
    pub(super) async fn reload(&mut self) -> anyhow::Result<()> {
        const RESTARTS: usize = 3;
        let plan = self.plan.clone();
        let command = self.command.clone();
        let objects = plan.reload_objects.unwrap_or(plan.small_objects);
        let graph = sample_json(objects);
        let mut sessions: Vec<String> = Vec::new();
        let mut counts = plan.session_counts.clone();
        counts.sort_unstable();
        counts.dedup();
        let dir = self.fresh_dir("reload")?;
        let mut stored = 0;
        let mut first_session: Option<String> = None;
        let mut reason: Option<String> = None;
        for &count in &counts {
            if let Some(reason) = &reason {
                self.rec.status("reload_first_query", Some(count), "ms", reason.clone());
                continue;
            }
            let outcome: Result<(f64, Option<u64>), Stop> = async {
                // Add sessions up to `count` on a server of its own.
                let mut client = self.spawn(&command, &dir).or_stop("reload_first_query", "ms")?;
                let added = async {
                    client.initialize().await?;
                    while stored < count {
                        let result = client.call_tool("validate_knowledge", json!({"json_data": graph})).await?;
                        let (session, _) = created_session(&result)?;
                        first_session.get_or_insert(session.clone());
                        sessions.push(session);
                        stored += 1;
                    }
                    Ok(())
                }
                .await;
                if let Err(e) = added {
                    client.kill().await;
                    return Err(Stop::new("reload_first_query", "ms", e));
                }
                client.shutdown(GRACE).await;
                let session = first_session.clone().unwrap_or_default();
                let mut samples = Vec::with_capacity(RESTARTS);
                for _ in 0..RESTARTS {
                    let (client, elapsed) =
                        self.restart_and_query(&command, &dir, &session, "reload_first_query").await?;
                    samples.push(ms(elapsed));
                    client.shutdown(GRACE).await;
                }
                let (mut client, _) = self.restart_and_query(&command, &dir, &session, "reload_first_query").await?;
                for session in &sessions {
                    let args = json!({"session_id": session, "seed_ids": ["n0"], "depth": 1, "max_objects": 10});
                    if let Err(e) = client.call_tool("query_subgraph", args).await {
                        client.kill().await;
                        return Err(Stop::new("reload_first_query", "ms", e));
                    }
                    client.sample_rss();
                }
                let touched_kib = client.shutdown(GRACE).await;
                Ok((quantile(&samples, 0.5), touched_kib))
            }
            .await;
            match outcome {
                Ok((median, touched_kib)) => {
                    let note = format!(
                        "stored sessions: {count}, of {objects} objects each; spawn → initialize → query_subgraph on \
                         the first one, median of {RESTARTS} restarts"
                    );
                    self.rec.value("reload_first_query", Some(count), "ms", median, Some(note));
                    if let Some(kib) = touched_kib {
                        let note = format!("after a restart, every one of the {count} sessions read once, in order");
                        self.rec.value("reload_touch_all_rss", Some(count), "MiB", kib as f64 / 1024.0, Some(note));
                    }
                }
                Err(stop) => {
                    self.rec.status("reload_first_query", Some(count), "ms", stop.status.clone());
                    reason = Some(format!(
                        "not reached: the run with {count} sessions {}",
                        crate::report::outcome(&stop.status)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A hybrid search of `session`: ten best matches, no neighbourhood.
fn search_args(session: &str) -> Value {
    json!({"session_id": session, "query": "sample concept number 77", "top_k": 10, "depth": 0})
}
