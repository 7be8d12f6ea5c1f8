//! Local users of the built-in issuer: people who sign in with a name and a password, made by
//! the operator (`cks-mcp users`). A password is kept as an Argon2id hash (the `argon2` crate's
//! defaults: 19 MiB, two passes), never as itself. Checking a name nobody has costs the same as
//! checking a wrong password, so the answer's time does not tell which names exist.

use std::sync::{Arc, LazyLock};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString, rand_core::OsRng};
use serde::{Deserialize, Serialize};

use cks_runtime::Runtime;
use cks_tools::Scope;

use super::{BuiltinError, now};

pub(crate) const USER: &str = "oauth.user.";

/// A local user, as kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    /// The most a token for them may hold.
    pub scope: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Argon2id, in the PHC string form.
    pub password_hash: String,
    pub created_at: u64,
}

/// Password checks running at once: each holds 19 MiB for tens of milliseconds, so a flood of
/// sign-ins waits here instead of taking the machine's memory.
static CHECKS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// A hash of no one's password, checked when the name is unknown.
static NOBODY: LazyLock<String> = LazyLock::new(|| hash("no one's password").unwrap_or_default());

fn hash(password: &str) -> Result<String, BuiltinError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| BuiltinError::Users(format!("the password could not be hashed: {e}")))
}

fn verifies(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
}

/// Whether `name` may name a user: letters, digits, `.`, `_`, `-`, `@`, 1 to 64 of them.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c))
}

/// Adds a user, or replaces one of the same name (a new password).
pub async fn add(
    runtime: &Runtime,
    name: &str,
    password: &str,
    scope: Scope,
    groups: Vec<String>,
) -> Result<User, BuiltinError> {
    if !valid_name(name) {
        return Err(BuiltinError::Users(format!(
            "'{name}' is not a user name: 1 to 64 letters, digits, '.', '_', '-' or '@'"
        )));
    }
    if password.chars().count() < 8 {
        return Err(BuiltinError::Users("a password has at least 8 characters".into()));
    }
    let password = password.to_owned();
    let password_hash = tokio::task::spawn_blocking(move || hash(&password))
        .await
        .map_err(|e| BuiltinError::Users(e.to_string()))??;
    let user =
        User { name: name.to_owned(), scope: scope.as_str().to_owned(), groups, password_hash, created_at: now() };
    let text = serde_json::to_string(&user).expect("users encode");
    runtime.store().save_setting(&format!("{USER}{name}"), &text).await?;
    Ok(user)
}

/// Every user, by name.
pub async fn list(runtime: &Runtime) -> Result<Vec<User>, BuiltinError> {
    let mut users: Vec<User> = runtime
        .store()
        .list_settings(USER)
        .await?
        .iter()
        .filter_map(|(_, text)| serde_json::from_str(text).ok())
        .collect();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(users)
}

/// Removes a user; whether there was one.
pub async fn remove(runtime: &Runtime, name: &str) -> Result<bool, BuiltinError> {
    Ok(runtime.store().delete_setting(&format!("{USER}{name}")).await?)
}

/// The user of that name.
pub async fn find(runtime: &Runtime, name: &str) -> Result<Option<User>, BuiltinError> {
    if !valid_name(name) {
        return Ok(None);
    }
    let text = runtime.store().load_setting(&format!("{USER}{name}")).await?;
    Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
}

/// The user whose name and password these are.
pub async fn sign_in(runtime: Arc<Runtime>, name: &str, password: &str) -> Result<Option<User>, BuiltinError> {
    let user = find(&runtime, name).await?;
    let hash = user.as_ref().map_or_else(|| NOBODY.clone(), |u| u.password_hash.clone());
    let password = password.to_owned();
    let _turn = CHECKS.acquire().await.map_err(|e| BuiltinError::Users(e.to_string()))?;
    let good = tokio::task::spawn_blocking(move || verifies(&password, &hash)).await.unwrap_or(false);
    Ok(user.filter(|_| good))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_runtime::RuntimeConfig;
    use cks_runtime::store::memory::MemoryStore;

    #[tokio::test]
    async fn a_user_signs_in_with_their_password_only() {
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        let alice = add(&runtime, "alice", "correct horse", Scope::Write, vec!["team".into()]).await.unwrap();
        assert!(alice.password_hash.starts_with("$argon2id$") && !alice.password_hash.contains("correct horse"));
        assert_eq!(sign_in(runtime.clone(), "alice", "correct horse").await.unwrap(), Some(alice));
        assert_eq!(sign_in(runtime.clone(), "alice", "wrong horse").await.unwrap(), None);
        assert_eq!(sign_in(runtime.clone(), "bob", "correct horse").await.unwrap(), None);
        assert!(add(&runtime, "al ice", "correct horse", Scope::Read, vec![]).await.is_err());
        assert!(add(&runtime, "bob", "short", Scope::Read, vec![]).await.is_err());
        assert_eq!(list(&runtime).await.unwrap().len(), 1);
        assert!(remove(&runtime, "alice").await.unwrap());
        assert_eq!(sign_in(runtime, "alice", "correct horse").await.unwrap(), None);
    }
}
