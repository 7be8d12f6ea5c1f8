//! Who makes a call and what they may do: the principal an access token names, with its scopes.
//!
//! Over HTTP with OAuth, `cks-mcp` validates the token and hands the principal to every call it
//! runs ([`crate::ToolContext::principal`]). Over stdio, and with one static HTTP token, there is
//! none: the caller is the server's one local user. Nothing here enforces ownership of data yet.

use std::fmt;

/// What a token allows, from least to most: each scope implies the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Read graphs, resources and prompts; subscribe; complete arguments.
    Read,
    /// Change graphs and run `ai_chat`.
    Write,
    /// Administer the server: storage, processes, sweepers, the gallery's entries.
    Admin,
}

impl Scope {
    /// Every scope, from least to most.
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Write, Scope::Admin];

    /// The scope's name in tokens and metadata.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "cks:read",
            Scope::Write => "cks:write",
            Scope::Admin => "cks:admin",
        }
    }

    /// The scope a token's scope name stands for; other names are not ours.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == name)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The caller an access token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The authorization server that issued the token (`iss`).
    pub issuer: String,
    /// The caller's identifier at that issuer (`sub`); unique only together with the issuer.
    pub subject: String,
    /// The highest of our scopes the token holds; `None` when it holds none of them.
    pub scope: Option<Scope>,
    /// The groups the token names (the configured claim), kept for later sharing rules.
    pub groups: Vec<String>,
}

impl Principal {
    /// Whether the token allows what `needed` allows (a higher scope implies the lower).
    pub fn allows(&self, needed: Scope) -> bool {
        self.scope.is_some_and(|held| held >= needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_implies_write_implies_read() {
        let with = |scope| Principal { issuer: "i".into(), subject: "s".into(), scope, groups: vec![] };
        assert!(with(Some(Scope::Admin)).allows(Scope::Write) && with(Some(Scope::Admin)).allows(Scope::Read));
        assert!(with(Some(Scope::Write)).allows(Scope::Read) && !with(Some(Scope::Write)).allows(Scope::Admin));
        assert!(!with(Some(Scope::Read)).allows(Scope::Write));
        assert!(!with(None).allows(Scope::Read));
        assert_eq!(Scope::parse("cks:write"), Some(Scope::Write));
        assert_eq!(Scope::parse("cks:owner"), None);
    }
}
