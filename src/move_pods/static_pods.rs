//! Static pods: the kubelet runs them from files in its manifest directory, and the eviction API
//! cannot move them. The kubelet names a static pod's UID after the file's content (and its
//! path and the node), so touching the file changes nothing; taking the file away stops the pod,
//! and putting it back, unchanged, starts it again under the same UID, in a new sandbox (the
//! kubelet's pod workers restart a pod re-added with the UID of one that terminated). The new
//! sandbox goes to the default backend. The file is set aside in the same directory under a
//! name the kubelet ignores (it skips names that begin with a dot), so that a move that dies
//! half-way leaves it where the next run, or the operator, finds it and puts it back.

use super::error::MoveError;
use std::fs;
use std::path::{Path, PathBuf};

/// What a set-aside manifest's name ends with.
const ASIDE: &str = ".cri-bridge-move";

/// The manifest in `dir` whose pod the API server calls `mirror_name` on `node` (the kubelet
/// names a static pod's mirror `<name>-<node>`) in `namespace`.
pub fn find_manifest(dir: &Path, namespace: &str, mirror_name: &str, node: &str) -> Result<PathBuf, MoveError> {
    let entries = fs::read_dir(dir).map_err(|e| MoveError::Manifests(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    for path in names {
        let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden || !path.is_file() {
            continue;
        }
        let Ok(text) = fs::read_to_string(&path) else { continue };
        // YAML or JSON, as the kubelet reads them; a file that is neither is not this pod's.
        let Ok(manifest) = serde_yaml::from_str::<serde_yaml::Value>(&text) else { continue };
        let field = |key: &str| manifest["metadata"][key].as_str().map(str::to_string);
        let name = field("name").unwrap_or_default();
        let in_namespace = field("namespace").unwrap_or_else(|| "default".into());
        if format!("{name}-{}", node.to_lowercase()) == mirror_name && in_namespace == namespace {
            return Ok(path);
        }
    }
    Err(MoveError::Manifests(format!(
        "no manifest in {} is the static pod {namespace}/{mirror_name} (set the kubelet's staticPodPath with --manifests)",
        dir.display()
    )))
}

/// A manifest taken out of the kubelet's sight; put back when dropped, whatever happens.
#[derive(Debug)]
pub struct SetAside {
    manifest: PathBuf,
    aside: PathBuf,
    back: bool,
}

impl SetAside {
    /// Renames `manifest` to `.<name>.cri-bridge-move` beside it.
    pub fn new(manifest: &Path) -> Result<SetAside, MoveError> {
        let aside = aside_name(manifest);
        fs::rename(manifest, &aside)
            .map_err(|e| MoveError::Manifests(format!("setting {} aside: {e}", manifest.display())))?;
        Ok(SetAside { manifest: manifest.to_path_buf(), aside, back: false })
    }

    /// Puts the manifest back: the kubelet starts the pod again.
    pub fn put_back(mut self) -> Result<(), MoveError> {
        self.back = true;
        restore(&self.aside, &self.manifest)
    }
}

impl Drop for SetAside {
    fn drop(&mut self) {
        if !self.back {
            if let Err(e) = restore(&self.aside, &self.manifest) {
                eprintln!("cri-bridge move: {e}");
            }
        }
    }
}

/// Puts back every manifest a move set aside in `dir` and did not restore (it was killed):
/// the paths put back.
pub fn restore_left_aside(dir: &Path) -> Result<Vec<PathBuf>, MoveError> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut restored = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(original) = name.strip_prefix('.').and_then(|n| n.strip_suffix(ASIDE)) else { continue };
        let manifest = dir.join(original);
        restore(&entry.path(), &manifest)?;
        restored.push(manifest);
    }
    Ok(restored)
}

fn aside_name(manifest: &Path) -> PathBuf {
    let name = manifest.file_name().unwrap_or_default().to_string_lossy();
    manifest.with_file_name(format!(".{name}{ASIDE}"))
}

fn restore(aside: &Path, manifest: &Path) -> Result<(), MoveError> {
    if manifest.exists() {
        // Someone wrote a new manifest meanwhile: theirs wins, ours stays aside for them to see.
        return Err(MoveError::Manifests(format!(
            "{} exists again; the copy set aside is left at {}",
            manifest.display(),
            aside.display()
        )));
    }
    fs::rename(aside, manifest)
        .map_err(|e| MoveError::Manifests(format!("putting {} back from {}: {e}", manifest.display(), aside.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("crib-static-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_manifest_is_found_by_its_mirrors_name_and_set_aside_and_back() {
        let dir = scratch("find");
        fs::write(
            dir.join("etcd.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n",
        )
        .unwrap();
        fs::write(dir.join("web.json"), r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"}}"#).unwrap();
        fs::write(dir.join("notes.txt"), "not: [a pod").unwrap();
        assert_eq!(find_manifest(&dir, "kube-system", "etcd-node-a", "Node-A").unwrap(), dir.join("etcd.yaml"));
        assert_eq!(find_manifest(&dir, "default", "web-node-a", "node-a").unwrap(), dir.join("web.json"));
        let missing = find_manifest(&dir, "default", "etcd-node-a", "node-a").unwrap_err().to_string();
        assert!(missing.contains("default/etcd-node-a") && missing.contains("--manifests"), "{missing}");

        let aside = SetAside::new(&dir.join("etcd.yaml")).unwrap();
        assert!(!dir.join("etcd.yaml").exists() && dir.join(".etcd.yaml.cri-bridge-move").exists());
        // Hidden from the kubelet, and from the search.
        assert!(find_manifest(&dir, "kube-system", "etcd-node-a", "node-a").is_err());
        aside.put_back().unwrap();
        assert!(dir.join("etcd.yaml").exists());

        // Dropped without put_back (an error, ^C): back all the same.
        drop(SetAside::new(&dir.join("etcd.yaml")).unwrap());
        assert!(dir.join("etcd.yaml").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_manifest_left_aside_by_a_killed_move_is_put_back() {
        let dir = scratch("restore");
        fs::write(dir.join(".etcd.yaml.cri-bridge-move"), "x").unwrap();
        fs::write(dir.join(".other-hidden"), "y").unwrap();
        assert_eq!(restore_left_aside(&dir).unwrap(), vec![dir.join("etcd.yaml")]);
        assert!(dir.join("etcd.yaml").exists() && dir.join(".other-hidden").exists());
        // One written anew meanwhile is not overwritten.
        fs::write(dir.join(".web.yaml.cri-bridge-move"), "old").unwrap();
        fs::write(dir.join("web.yaml"), "new").unwrap();
        assert!(restore_left_aside(&dir).is_err());
        assert_eq!(fs::read_to_string(dir.join("web.yaml")).unwrap(), "new");
        fs::remove_dir_all(&dir).unwrap();
    }
}
