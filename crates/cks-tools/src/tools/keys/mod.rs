//! API keys for headless clients (scripts, CI jobs, agents without a browser): created, listed
//! and revoked by an operator. A key acts as one principal with one scope; it is shown once, when
//! created, and kept only as a digest (`crate::api_keys`). Server management: `cks:admin` only,
//! never offered to `ai_chat`.

mod create_api_key;
mod list_api_keys;
mod revoke_api_key;

use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cks_runtime::api_keys::ApiKeyRecord;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(create_api_key::CreateApiKey), listed(list_api_keys::ListApiKeys), listed(revoke_api_key::RevokeApiKey)]
}

/// A key as the tools show it: its record without the digest, and its state now.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct KeyView {
    id: String,
    issuer: String,
    subject: String,
    scope: String,
    groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    created_at: String,
    expires_at: Option<String>,
    revoked_at: Option<String>,
    /// `active`, `expired` or `revoked`.
    state: &'static str,
}

impl KeyView {
    pub(crate) fn new(record: ApiKeyRecord, now: OffsetDateTime) -> Self {
        let state = if record.revoked_at.is_some() {
            "revoked"
        } else if expired(&record, now) {
            "expired"
        } else {
            "active"
        };
        KeyView {
            id: record.id,
            issuer: record.issuer,
            subject: record.subject,
            scope: record.scope,
            groups: record.groups,
            label: record.label,
            created_at: record.created_at,
            expires_at: record.expires_at,
            revoked_at: record.revoked_at,
            state,
        }
    }
}

/// Whether the key's time is up at `now`. An expiry that does not read counts as passed: a key
/// whose end nobody can tell is refused rather than kept forever.
pub fn expired(record: &ApiKeyRecord, now: OffsetDateTime) -> bool {
    record.expires_at.as_deref().is_some_and(|at| OffsetDateTime::parse(at, &Rfc3339).map_or(true, |at| at <= now))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context};

    #[tokio::test]
    async fn a_key_is_shown_once_listed_without_its_value_and_revoked() {
        let ctx = context();
        let made = call(
            &ctx,
            "create_api_key",
            json!({"subject": "nightly-import", "scope": "cks:write", "groups": ["curators"], "expires_in_days": 30}),
        )
        .await;
        let key = made["key"].as_str().unwrap().to_owned();
        let id = made["id"].as_str().unwrap().to_owned();
        assert_eq!(crate::api_keys::id_of(&key), Some(id.as_str()));
        assert_eq!((made["scope"].as_str(), made["state"].as_str()), (Some("cks:write"), Some("active")));
        assert_eq!(made["issuer"], crate::api_keys::ISSUER);
        let record = ctx.runtime.api_key(&id).await.unwrap().unwrap();
        assert_eq!(record.digest, crate::api_keys::digest(&key));
        assert!(!serde_json::to_string(&record).unwrap().contains(&key[16..]), "the secret is not kept");

        let listed = call(&ctx, "list_api_keys", json!({})).await;
        assert_eq!(listed["key_count"], 1);
        assert_eq!(listed["keys"][0]["id"], id.as_str());
        assert!(!listed.to_string().contains(&key[16..]), "a list never shows a key");

        // Revoked by the key itself; the answer names its id, never the key.
        let revoked = call(&ctx, "revoke_api_key", json!({"id": key})).await;
        assert_eq!(revoked["id"], id.as_str());
        assert!(!revoked.to_string().contains(&key[16..]));
        let again = call(&ctx, "revoke_api_key", json!({"id": id})).await;
        assert_eq!(again["revoked_at"], revoked["revoked_at"], "a second revocation changes nothing");
        assert_eq!(call(&ctx, "list_api_keys", json!({})).await["key_count"], 0);
        let all = call(&ctx, "list_api_keys", json!({"all": true})).await;
        assert_eq!(all["keys"][0]["state"], "revoked");

        let missing = call(&ctx, "revoke_api_key", json!({"id": format!("{key}x")})).await;
        assert_eq!(missing["error"], "not_found");
        assert!(!missing.to_string().contains(&key[16..]), "a mistyped key is not echoed");
    }

    #[tokio::test]
    async fn bad_arguments_are_refused_and_nothing_is_kept() {
        let ctx = context();
        for args in [
            json!({"subject": "", "scope": "cks:read"}),
            json!({"subject": "a\nb", "scope": "cks:read"}),
            json!({"subject": "ci", "scope": "root"}),
            json!({"subject": "ci", "scope": "cks:read", "expires_in_days": 0}),
            json!({"subject": "ci", "scope": "cks:read", "groups": ["x".repeat(300)]}),
        ] {
            let answer = call(&ctx, "create_api_key", args.clone()).await;
            assert_eq!(answer["error"], "invalid_parameter", "{args}: {answer}");
        }
        assert!(ctx.runtime.api_keys().await.unwrap().is_empty());
    }

    #[test]
    fn an_expiry_passed_or_unreadable_ends_a_key() {
        use time::OffsetDateTime;
        use time::format_description::well_known::Rfc3339;
        let mut record = cks_runtime::api_keys::ApiKeyRecord {
            id: "0123456789ab".into(),
            issuer: crate::api_keys::ISSUER.into(),
            subject: "ci".into(),
            scope: "cks:read".into(),
            groups: vec![],
            label: None,
            digest: String::new(),
            created_at: "2026-01-01T00:00:00Z".into(),
            expires_at: None,
            revoked_at: None,
        };
        let now = OffsetDateTime::parse("2026-06-01T00:00:00Z", &Rfc3339).unwrap();
        assert!(!super::expired(&record, now));
        record.expires_at = Some("2026-07-01T00:00:00Z".into());
        assert!(!super::expired(&record, now));
        record.expires_at = Some("2026-05-01T00:00:00Z".into());
        assert!(super::expired(&record, now));
        record.expires_at = Some("next week".into());
        assert!(super::expired(&record, now));
    }
}
