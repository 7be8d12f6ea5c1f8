//! Where a `Component` object's code publishes its version, and reading it through the guarded
//! fetcher: the [`VersionSource`] of `check_component_versions`, `update_registered_graph` and the
//! `graph_auto_update` sweeper.
//!
//! A component names its code as the reference's do: a known name of the CKS ecosystem, or a
//! GitHub `repo_url` (a URL or `owner/repo`), read on the `main` branch through GitHub's raw file
//! host. `version_source` says which file holds the version: `_version.py` (the default, its
//! `__version__`), `package.json` (as in the reference), or, beyond it, `pyproject.toml` and
//! `Cargo.toml`. A Python component without a `_version.py` falls back to `pyproject.toml`, and
//! `version_url` names the file itself, on any host (code that is not on GitHub).

use std::sync::Arc;

use serde_json::Value;

use cks_runtime::versions::{Component, Released, VersionSource};
use cks_web::fetch::Fetcher;

/// GitHub's host for a repository's files as stored (`/{owner}/{repo}/{branch}/{path}`).
const GITHUB_RAW: &str = "https://raw.githubusercontent.com";
/// The branch read, as in the reference.
const BRANCH: &str = "main";
/// Version files are small; a larger answer is not one.
const MAX_FILE_BYTES: usize = 1 << 20;

/// The reference's table of the CKS ecosystem's own components: repository and version file.
const KNOWN: &[(&str, &str, &str)] = &[
    ("cks-core", "Deus-corp/cks-core", "src/cks/_version.py"),
    ("cks-runtime", "Deus-corp/cks-runtime", "cks_runtime/_version.py"),
    ("cks-mcp", "Deus-corp/cks-mcp", "src/cks_mcp/_version.py"),
];

/// How a version file states its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// A Python module's `__version__ = "…"`.
    PythonModule,
    /// `package.json`'s top-level `version`.
    PackageJson,
    /// `pyproject.toml`'s `[project] version` (or Poetry's `[tool.poetry] version`).
    Pyproject,
    /// `Cargo.toml`'s `[package] version`, or the workspace's when the package inherits it.
    Cargo,
}

impl Format {
    /// The format `version_source` names; `None` for a name this server does not read.
    fn named(source: &str) -> Option<Format> {
        match source {
            "_version.py" | "python" => Some(Format::PythonModule),
            "package.json" => Some(Format::PackageJson),
            "pyproject.toml" => Some(Format::Pyproject),
            "Cargo.toml" => Some(Format::Cargo),
            _ => None,
        }
    }

    /// The format a file's name suggests (for `version_url`).
    fn of_file(url: &str) -> Format {
        let file = url.split(['?', '#']).next().unwrap_or(url).rsplit('/').next().unwrap_or(url);
        match file {
            "package.json" => Format::PackageJson,
            "pyproject.toml" => Format::Pyproject,
            "Cargo.toml" => Format::Cargo,
            _ => Format::PythonModule,
        }
    }
}

/// One file to try.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Candidate {
    url: String,
    format: Format,
}

/// Reads published versions over the web, through the guarded fetcher only.
#[derive(Clone, Debug)]
pub struct WebVersions {
    fetcher: Arc<Fetcher>,
    /// Where `owner/repo` files are read from (GitHub's raw host; a test server in tests).
    raw_base: String,
}

impl WebVersions {
    pub fn new(fetcher: Arc<Fetcher>) -> Self {
        WebVersions { fetcher, raw_base: GITHUB_RAW.to_owned() }
    }

    /// Reads repositories' files from `raw_base` instead of GitHub (tests).
    #[cfg(test)]
    pub(crate) fn reading_repositories_from(mut self, raw_base: &str) -> Self {
        raw_base.trim_end_matches('/').clone_into(&mut self.raw_base);
        self
    }

    /// The files to try, in order, or why there are none.
    fn candidates(&self, component: &Component) -> Result<Vec<Candidate>, String> {
        let text = |key: &str| component.structure.get(key).and_then(Value::as_str).map(str::trim);
        let named = text("version_source").filter(|s| !s.is_empty());
        let format = match named {
            Some(source) => Format::named(source).ok_or_else(|| {
                format!(
                    "'version_source' of '{}' is '{source}'; this server reads _version.py, package.json, \
                     pyproject.toml or Cargo.toml.",
                    component.name
                )
            })?,
            None => Format::PythonModule,
        };
        if let Some(url) = text("version_url").filter(|u| !u.is_empty()) {
            let format = if named.is_some() { format } else { Format::of_file(url) };
            return Ok(vec![Candidate { url: url.to_owned(), format }]);
        }
        let package = component.name.replace('-', "_");
        let known = KNOWN.iter().find(|(name, ..)| *name == component.name);
        let repo = text("repo_url").and_then(repository);
        let (repo, paths): (String, Vec<(String, Format)>) = match (known, repo) {
            // A known Python component: its file, as the reference reads it.
            (Some((_, repo, path)), _) if format == Format::PythonModule => (
                (*repo).to_owned(),
                vec![((*path).to_owned(), format), ("pyproject.toml".to_owned(), Format::Pyproject)],
            ),
            (_, Some(repo)) => (repo, paths(format, &component.name, &package)),
            (Some((_, repo, _)), None) => ((*repo).to_owned(), paths(format, &component.name, &package)),
            (None, None) => {
                return Err(format!(
                    "Could not determine a GitHub repository for '{}' (no known mapping and no usable 'repo_url' \
                     or 'version_url' in its structure).",
                    component.name
                ));
            }
        };
        Ok(paths
            .into_iter()
            .map(|(path, format)| Candidate { url: format!("{}/{repo}/{BRANCH}/{path}", self.raw_base), format })
            .collect())
    }

    /// The first candidate that answers with a version; else why the last one did not. A URL
    /// refused as it stands (not public) ends the search, as in the reference.
    async fn read(&self, candidates: &[Candidate]) -> Released {
        let mut last = String::from("no file to read");
        for candidate in candidates {
            let url = &candidate.url;
            let text = match self.fetch(url).await {
                Ok(text) => text,
                Err(Fetch::Refused(why)) => return Released::Failed(format!("unsafe_url: {why}")),
                Err(Fetch::Failed(why)) => {
                    last = why;
                    continue;
                }
            };
            let found = match candidate.format {
                Format::PythonModule => python_version(&text).ok_or_else(|| format!("no __version__ found at {url}")),
                Format::PackageJson => package_json_version(&text).map_err(|why| format!("{why} at {url}")),
                Format::Pyproject => pyproject_version(&text).map_err(|why| format!("{why} at {url}")),
                Format::Cargo => match cargo_version(&text) {
                    Ok(CargoVersion::Own(version)) => Ok(version),
                    Ok(CargoVersion::Inherited) => self.workspace_version(url).await,
                    Err(why) => Err(format!("{why} at {url}")),
                },
            };
            match found {
                Ok(version) => return Released::Found { version, url: url.clone() },
                Err(why) => last = why,
            }
        }
        Released::Failed(last)
    }

    /// The version a package at `url` inherits: the nearest workspace root's, looked for in the
    /// directories above it (a crate sits at most a few levels below its workspace).
    async fn workspace_version(&self, url: &str) -> Result<String, String> {
        let mut dir = url.rsplit_once('/').map(|(dir, _)| dir).unwrap_or(url);
        for _ in 0..3 {
            let Some((parent, _)) = dir.rsplit_once('/') else { break };
            dir = parent;
            let root = format!("{dir}/Cargo.toml");
            if let Ok(text) = self.fetch(&root).await
                && let Some(version) = workspace_package_version(&text)
            {
                return Ok(version);
            }
        }
        Err(format!("the package at {url} inherits its workspace's version, and no workspace root above it states one"))
    }

    async fn fetch(&self, url: &str) -> Result<String, Fetch> {
        match self.fetcher.get(url, MAX_FILE_BYTES).await {
            Ok(fetched) if fetched.status == 200 => Ok(String::from_utf8_lossy(&fetched.body).into_owned()),
            Ok(fetched) => Err(Fetch::Failed(format!("could not fetch {url} (HTTP {})", fetched.status))),
            Err(e) if e.refused_at_once() => Err(Fetch::Refused(e.to_string())),
            Err(e) => Err(Fetch::Failed(format!("could not fetch {url}: {e}"))),
        }
    }
}

enum Fetch {
    Refused(String),
    Failed(String),
}

#[async_trait::async_trait]
impl VersionSource for WebVersions {
    async fn released(&self, component: &Component) -> Released {
        match self.candidates(component) {
            Ok(candidates) => self.read(&candidates).await,
            Err(why) => Released::UnknownRepo(why),
        }
    }
}

/// The paths to try in a repository for a file of `format`: the reference's for `_version.py`
/// and `package.json` (the package directory named as the component, dashes made underscores,
/// or as it stands for the others). A name that is not one path segment names no directory: only
/// the repository's root is tried then.
fn paths(format: Format, name: &str, package: &str) -> Vec<(String, Format)> {
    if !segment(name) {
        let root = match format {
            Format::PythonModule => "_version.py",
            Format::PackageJson => "package.json",
            Format::Pyproject => "pyproject.toml",
            Format::Cargo => "Cargo.toml",
        };
        return vec![(root.to_owned(), format)];
    }
    let paths = match format {
        Format::PythonModule => {
            let mut paths: Vec<(String, Format)> =
                ["_version.py".to_owned(), format!("{package}/_version.py"), format!("src/{package}/_version.py")]
                    .into_iter()
                    .map(|p| (p, format))
                    .collect();
            // Most Python projects now state their version in pyproject.toml only.
            paths.push(("pyproject.toml".to_owned(), Format::Pyproject));
            return paths;
        }
        Format::PackageJson => vec!["package.json".to_owned(), format!("{package}/package.json")],
        Format::Pyproject => vec!["pyproject.toml".to_owned(), format!("{name}/pyproject.toml")],
        // A crate of a workspace first, then the root (which may be the crate itself).
        Format::Cargo => {
            vec![format!("crates/{name}/Cargo.toml"), format!("{name}/Cargo.toml"), "Cargo.toml".to_owned()]
        }
    };
    paths.into_iter().map(|p| (p, format)).collect()
}

/// `owner/repo` from a GitHub URL (`https://github.com/owner/repo.git/…`) or an `owner/repo` text.
fn repository(repo_url: &str) -> Option<String> {
    let path = match repo_url.split_once("://") {
        Some((_, rest)) => {
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            let host = host.rsplit('@').next().unwrap_or(host).split(':').next().unwrap_or(host);
            if !(host == "github.com" || host.ends_with(".github.com")) {
                return None;
            }
            path
        }
        None => repo_url,
    };
    let mut parts = path.split(['/', '?', '#']).filter(|p| !p.is_empty());
    let (owner, repo) = (parts.next()?, parts.next()?);
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    (segment(owner) && segment(repo)).then(|| format!("{owner}/{repo}"))
}

/// Whether `text` can stand as one segment of a URL's path as it is.
fn segment(text: &str) -> bool {
    !text.is_empty()
        && text != "."
        && text != ".."
        && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// The first `__version__ = "…"` (or `'…'`) of a Python module.
fn python_version(text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(at) = rest.find("__version__") {
        rest = &rest[at + "__version__".len()..];
        let after = rest.trim_start();
        let Some(value) = after.strip_prefix('=') else { continue };
        let value = value.trim_start();
        let Some(quoted) = value.strip_prefix(['"', '\'']) else { continue };
        let end = quoted.find(['"', '\'']).unwrap_or(0);
        if end > 0 {
            return Some(quoted[..end].to_owned());
        }
    }
    None
}

fn package_json_version(text: &str) -> Result<String, &'static str> {
    let document: Value = serde_json::from_str(text).map_err(|_| "invalid JSON")?;
    match document.get("version") {
        Some(Value::String(version)) if !version.is_empty() => Ok(version.clone()),
        _ => Err("no 'version' field found"),
    }
}

fn toml(text: &str) -> Result<toml_edit::DocumentMut, &'static str> {
    text.parse().map_err(|_| "invalid TOML")
}

fn pyproject_version(text: &str) -> Result<String, &'static str> {
    let document = toml(text)?;
    let text_at = |table: &str, inner: Option<&str>| {
        let item = document.get(table)?;
        let item = match inner {
            Some(inner) => item.get(inner)?,
            None => item,
        };
        item.get("version")?.as_str().filter(|v| !v.is_empty()).map(str::to_owned)
    };
    if let Some(version) = text_at("project", None).or_else(|| text_at("tool", Some("poetry"))) {
        return Ok(version);
    }
    let dynamic = document
        .get("project")
        .and_then(|p| p.get("dynamic"))
        .and_then(|d| d.as_array())
        .is_some_and(|d| d.iter().any(|v| v.as_str() == Some("version")));
    Err(if dynamic { "the version is computed at build time ('dynamic')" } else { "no project version found" })
}

/// What a `Cargo.toml` says of its package's version.
#[derive(Debug, PartialEq, Eq)]
enum CargoVersion {
    Own(String),
    /// `version.workspace = true`.
    Inherited,
}

fn cargo_version(text: &str) -> Result<CargoVersion, &'static str> {
    let document = toml(text)?;
    if let Some(version) = document.get("package").and_then(|p| p.get("version")) {
        if let Some(version) = version.as_str().filter(|v| !v.is_empty()) {
            return Ok(CargoVersion::Own(version.to_owned()));
        }
        if version.get("workspace").and_then(|w| w.as_bool()) == Some(true) {
            return Ok(CargoVersion::Inherited);
        }
    }
    // A workspace root without a package of its own states the version its members share.
    workspace_version_of(&document).map(CargoVersion::Own).ok_or("no package version found")
}

fn workspace_package_version(text: &str) -> Option<String> {
    workspace_version_of(&toml(text).ok()?)
}

fn workspace_version_of(document: &toml_edit::DocumentMut) -> Option<String> {
    let version = document.get("workspace")?.get("package")?.get("version")?.as_str()?;
    (!version.is_empty()).then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::{HttpServer, Reply};
    use crate::tools::knowledge::verify_source::tests::local_context;

    fn component(name: &str, structure: Value) -> Component {
        Component {
            object_id: name.into(),
            name: name.into(),
            version: structure.get("version").cloned().unwrap_or(Value::Null),
            structure: serde_json::from_value(structure).unwrap(),
        }
    }

    fn urls(source: &WebVersions, component: &Component) -> Vec<String> {
        source.candidates(component).unwrap().into_iter().map(|c| c.url).collect()
    }

    #[test]
    fn resolves_files_as_the_reference_and_beyond() {
        let source = WebVersions::new(Arc::new(Fetcher::default()));
        let raw = "https://raw.githubusercontent.com";
        assert_eq!(
            urls(&source, &component("cks-core", json!({"version": "1"}))),
            [
                format!("{raw}/Deus-corp/cks-core/main/src/cks/_version.py"),
                format!("{raw}/Deus-corp/cks-core/main/pyproject.toml")
            ]
        );
        assert_eq!(
            urls(&source, &component("my-lib", json!({"repo_url": "https://github.com/o/r.git"}))),
            [
                format!("{raw}/o/r/main/_version.py"),
                format!("{raw}/o/r/main/my_lib/_version.py"),
                format!("{raw}/o/r/main/src/my_lib/_version.py"),
                format!("{raw}/o/r/main/pyproject.toml")
            ]
        );
        let npm = json!({"repo_url": "o/r", "version_source": "package.json"});
        assert_eq!(
            urls(&source, &component("web-ui", npm)),
            [format!("{raw}/o/r/main/package.json"), format!("{raw}/o/r/main/web_ui/package.json")]
        );
        let cargo = json!({"repo_url": "https://github.com/o/r/tree/main", "version_source": "Cargo.toml"});
        assert_eq!(
            urls(&source, &component("cli", cargo)),
            [
                format!("{raw}/o/r/main/crates/cli/Cargo.toml"),
                format!("{raw}/o/r/main/cli/Cargo.toml"),
                format!("{raw}/o/r/main/Cargo.toml")
            ]
        );
        let direct = json!({"version_url": "https://example.org/x/pyproject.toml"});
        let found = source.candidates(&component("x", direct)).unwrap();
        assert_eq!(
            found,
            [Candidate { url: "https://example.org/x/pyproject.toml".into(), format: Format::Pyproject }]
        );

        for unknown in [json!({}), json!({"repo_url": "https://gitlab.com/o/r"}), json!({"repo_url": "o"})] {
            let why = source.candidates(&component("nowhere", unknown)).unwrap_err();
            assert!(why.contains("Could not determine a GitHub repository for 'nowhere'"), "{why}");
        }
        let odd = source.candidates(&component("x", json!({"repo_url": "o/r", "version_source": "setup.cfg"})));
        assert!(odd.unwrap_err().contains("'setup.cfg'"));
        assert_eq!(repository("https://github.com/../r"), None);
        assert_eq!(
            urls(&source, &component("a/../../b?x", json!({"repo_url": "o/r", "version_source": "Cargo.toml"}))),
            [format!("{raw}/o/r/main/Cargo.toml")],
            "a name that is no path segment names no directory"
        );
    }

    #[test]
    fn reads_each_format() {
        assert_eq!(python_version("x = 1\n__version__ = '1.2.3'\n").as_deref(), Some("1.2.3"));
        assert_eq!(python_version("__version__: str = \"1\"\n__version__ = \"2.0\"").as_deref(), Some("2.0"));
        assert_eq!(python_version("version = '1'"), None);
        assert_eq!(package_json_version(r#"{"name": "x", "version": "0.4.1"}"#), Ok("0.4.1".into()));
        assert_eq!(package_json_version(r#"{"version": ""}"#), Err("no 'version' field found"));
        assert_eq!(package_json_version("{"), Err("invalid JSON"));
        assert_eq!(pyproject_version("[project]\nname = \"x\"\nversion = \"3.1\"\n"), Ok("3.1".into()));
        assert_eq!(pyproject_version("[tool.poetry]\nversion = \"0.9\"\n"), Ok("0.9".into()));
        assert_eq!(
            pyproject_version("[project]\ndynamic = [\"version\"]\n"),
            Err("the version is computed at build time ('dynamic')")
        );
        assert_eq!(pyproject_version("[project\n"), Err("invalid TOML"));
        assert_eq!(
            cargo_version("[package]\nname = \"a\"\nversion = \"1.4.0\"\n"),
            Ok(CargoVersion::Own("1.4.0".into()))
        );
        assert_eq!(cargo_version("[package]\nversion.workspace = true\n"), Ok(CargoVersion::Inherited));
        assert_eq!(cargo_version("[package]\nversion = { workspace = true }\n"), Ok(CargoVersion::Inherited));
        let root = "[workspace]\nmembers = [\"crates/*\"]\n[workspace.package]\nversion = \"2.2.0\"\n";
        assert_eq!(cargo_version(root), Ok(CargoVersion::Own("2.2.0".into())));
        assert_eq!(cargo_version("[dependencies]\n"), Err("no package version found"));
    }

    #[tokio::test]
    async fn fetches_through_the_guarded_fetcher_and_tells_each_failure() {
        let server = HttpServer::start(|_, path| match path {
            "/o/py/main/src/py_lib/_version.py" => Reply::status(200).body("__version__ = \"1.4.0\"\n"),
            "/o/modern/main/pyproject.toml" => Reply::status(200).body("[project]\nversion = \"0.3.0\"\n"),
            "/o/ws/main/crates/cli/Cargo.toml" => Reply::status(200).body("[package]\nversion.workspace = true\n"),
            "/o/ws/main/Cargo.toml" => Reply::status(200).body("[workspace.package]\nversion = \"5.0.1\"\n"),
            "/o/bad/main/package.json" => Reply::status(200).body("not json"),
            _ => Reply::status(404),
        })
        .await;
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        let source = WebVersions::new(local_context().fetcher).reading_repositories_from(&base);
        let released = |name: &str, structure: Value| {
            let source = source.clone();
            let component = component(name, structure);
            async move { source.released(&component).await }
        };
        let found =
            |version: &str, path: &str| Released::Found { version: version.into(), url: format!("{base}{path}") };
        assert_eq!(
            released("py-lib", json!({"repo_url": "o/py"})).await,
            found("1.4.0", "/o/py/main/src/py_lib/_version.py")
        );
        assert_eq!(
            released("modern", json!({"repo_url": "o/modern"})).await,
            found("0.3.0", "/o/modern/main/pyproject.toml")
        );
        let cargo = json!({"repo_url": "o/ws", "version_source": "Cargo.toml"});
        assert_eq!(released("cli", cargo).await, found("5.0.1", "/o/ws/main/crates/cli/Cargo.toml"));
        let Released::Failed(why) =
            released("ui", json!({"repo_url": "o/bad", "version_source": "package.json"})).await
        else {
            panic!("a failure")
        };
        assert!(why.contains("could not fetch") && why.contains("/o/bad/main/ui/package.json"), "{why}");
        let Released::Failed(why) = released("gone", json!({"repo_url": "o/gone"})).await else { panic!("a failure") };
        assert!(why.contains("HTTP 404"), "{why}");
        // Only the test server's address is allowed: another private one is refused at once.
        let refused = WebVersions::new(local_context().fetcher).reading_repositories_from("http://10.0.0.1");
        let Released::Failed(why) = refused.released(&component("x", json!({"repo_url": "o/r"}))).await else {
            panic!("a failure")
        };
        assert!(why.starts_with("unsafe_url: "), "{why}");
    }
}
