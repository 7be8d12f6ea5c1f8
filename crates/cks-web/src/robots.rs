//! robots.txt, for a fetcher of pages nobody named (the Enrichment process finds pages itself,
//! unattended, so it behaves as a well-mannered crawler and asks each site first). A site's rules are fetched once (through the
//! guarded fetcher) and kept for an hour. No robots.txt (a 4xx answer) allows everything; a
//! robots.txt that cannot be had (no answer, a 5xx) allows nothing for now, as the robots
//! exclusion protocol (RFC 9309) asks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Url;
use texting_robots::Robot;

use crate::fetch::{FetchError, Fetcher};

/// The product token this server's rules are looked up under (`User-agent: cks-mcp`).
pub const AGENT: &str = "cks-mcp";
/// How long a site's rules are kept.
const KEEP: Duration = Duration::from_secs(3600);
/// The most of a robots.txt read (RFC 9309 asks for at least 500 KiB).
const MAX_ROBOTS_BYTES: usize = 512 * 1024;

/// What a site's robots.txt says about fetching a page.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Allowed,
    Disallowed,
    /// The rules could not be had: ask again later.
    Unavailable(String),
    /// The robots.txt address itself may not be fetched.
    Refused(FetchError),
}

enum Rules {
    All,
    Parsed(Robot),
}

/// Sites' rules, by origin.
#[derive(Default)]
pub struct RobotsCache {
    sites: Mutex<HashMap<String, (Instant, Arc<Rules>)>>,
}

impl std::fmt::Debug for RobotsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sites = self.sites.lock().map_or(0, |sites| sites.len());
        f.debug_struct("RobotsCache").field("sites", &sites).finish()
    }
}

impl RobotsCache {
    pub async fn verdict(&self, fetcher: &Fetcher, url: &str) -> Verdict {
        let Ok(parsed) = Url::parse(url) else { return Verdict::Disallowed };
        let origin = parsed.origin().ascii_serialization();
        let cached = {
            let sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
            sites.get(&origin).filter(|(at, _)| at.elapsed() < KEEP).map(|(_, rules)| rules.clone())
        };
        let rules = match cached {
            Some(rules) => rules,
            None => {
                let rules = match fetcher.get(&format!("{origin}/robots.txt"), MAX_ROBOTS_BYTES).await {
                    Ok(fetched) if fetched.status < 300 => match Robot::new(AGENT, &fetched.body) {
                        Ok(robot) => Rules::Parsed(robot),
                        // Unreadable rules state nothing.
                        Err(_) => Rules::All,
                    },
                    Ok(fetched) if (400..500).contains(&fetched.status) => Rules::All,
                    Ok(fetched) => return Verdict::Unavailable(format!("robots.txt answered HTTP {}", fetched.status)),
                    Err(e @ FetchError::UnsafeUrl { .. }) => return Verdict::Refused(e),
                    Err(e) => return Verdict::Unavailable(format!("robots.txt: {e}")),
                };
                let rules = Arc::new(rules);
                let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
                sites.insert(origin, (Instant::now(), rules.clone()));
                rules
            }
        };
        match &*rules {
            Rules::All => Verdict::Allowed,
            Rules::Parsed(robot) if robot.allowed(url) => Verdict::Allowed,
            Rules::Parsed(_) => Verdict::Disallowed,
        }
    }
}
