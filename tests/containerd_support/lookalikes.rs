//! Look-alikes of the images critest 1.37 pulls, under the names it pulls them by, built from
//! busybox-static on the spot: what each image is to critest (its users and groups, a file that
//! tells it apart, a web server on the right port, a set-user-ID program) and no more. Served by
//! the test registry (`Extras::images`) for the hosts in `MIRRORED_HOSTS`.
//!
//! Where a look-alike is not faithful, the critest tests that need the real thing fail natively
//! as through cri-bridge (tests/critest.rs lists them): `test-image-digest` is pulled by the digest
//! of the real image's manifest, which no other content can have, so it is not served at all.

use super::registry::Image;
use super::{go_arch, run, sha256_bytes};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The registry hosts critest's image names use.
pub const MIRRORED_HOSTS: &[&str] = &["registry.k8s.io", "k8s.gcr.io", "gcr.io", "docker.io"];

/// The sandbox image (as containerd 2.x and kubelets 1.3x default to): a process named `pause`
/// that waits for a signal, never a `sleep` that critest's `pgrep sleep` would find in the pod.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// critest's own test images (`gcr.io/k8s-staging-cri-tools/…`).
const CRI_TOOLS: &str = "k8s-staging-cri-tools";

/// critest's look-alike images, their layers built under `scratch`.
pub fn critest_images(scratch: &Path) -> Vec<Image> {
    let nnp = program("nnp");
    let pause = layer(scratch, "pause", &[("pause".into(), Entry::File(fs::read(program("pause")).unwrap(), 0o755))]);
    let base = base_layer(scratch);
    let image = |repository: &str, tags: &[&str], config: Config, extra: Vec<Vec<u8>>| {
        let mut layers = vec![base.clone()];
        layers.extend(extra);
        let config = config.json(scratch, &format!("{repository}:{}", tags[0]), &layers);
        Image { repository: repository.into(), tags: tags.iter().map(|t| t.to_string()).collect(), config, layers }
    };
    let shell = || Config { cmd: &["sh"], ..Config::default() };
    // `ADD ${TEST} ${TEST}`: a file named after the image tells each apart.
    let marked = |name: &str| vec![layer(scratch, name, &[(name.to_string(), Entry::File(Vec::new(), 0o644))])];
    let user = |user: &'static str| Config { user, ..shell() };
    let cri_tools = |name: &str| format!("{CRI_TOOLS}/{name}");
    let mut images = vec![
        // framework.DefaultLinuxContainerImage: every ordinary container.
        image("e2e-test-images/busybox", &["1.29-2"], shell(), Vec::new()),
        // The same image from two registries (Image Identifier Consistency, Image Manager); and
        // another, the sandboxes'.
        image("pause", &["3.9"], Config { entrypoint: &["/pause"], ..Config::default() }, vec![pause.clone()]),
        image("pause", &["3.10"], Config { entrypoint: &["/pause"], ..Config::default() }, vec![pause]),
        image(&cri_tools("test-image-latest"), &["latest"], shell(), marked("test-image-latest")),
        image(&cri_tools("test-image-tag"), &["test", "all"], shell(), marked("test-image-tag")),
        image(&cri_tools("test-image-tags"), &["1", "2", "3"], shell(), marked("test-image-tags")),
        image(&cri_tools("test-image-user-uid"), &["latest"], user("1002"), Vec::new()),
        image(&cri_tools("test-image-user-username"), &["latest"], user("www-data"), Vec::new()),
        image(&cri_tools("test-image-user-uid-group"), &["latest"], user("1003:1004"), Vec::new()),
        image(&cri_tools("test-image-user-username-group"), &["latest"], user("www-data:1004"), Vec::new()),
        image(
            &cri_tools("test-image-predefined-group"),
            &["latest"],
            user("1000"),
            vec![layer(
                scratch,
                "predefined-group",
                &[
                    (
                        "etc/passwd".into(),
                        Entry::File(
                            format!("{PASSWD}default-user:x:1000:1000::/home/default-user:/bin/sh\n").into_bytes(),
                            0o644,
                        ),
                    ),
                    (
                        "etc/group".into(),
                        Entry::File(
                            format!("{GROUP}default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")
                                .into_bytes(),
                            0o644,
                        ),
                    ),
                    ("home/default-user".into(), Entry::Dir(0o755)),
                ],
            )],
        ),
        // Serves on port 80 in the pod; its pid where nginx writes it; `nginx` as its process
        // name, and nginx's master-process title in its command line (critest reads both).
        image(
            "e2e-test-images/nginx",
            &["1.14-2"],
            Config {
                cmd: &["/usr/sbin/nginx", "nginx: master process nginx -g daemon off;"],
                env: &["NGINX_PORT=80"],
                ..Config::default()
            },
            vec![web_layer(scratch, "nginx", "/usr/share/nginx/html")],
        ),
        // The same on the host network, on 12003 (images/hostnet-nginx's default.conf).
        image(
            &cri_tools(&format!("hostnet-nginx-{}", go_arch())),
            &["latest"],
            Config {
                cmd: &["/usr/sbin/nginx", "nginx: master process nginx -g daemon off;"],
                env: &["NGINX_PORT=12003"],
                ..Config::default()
            },
            vec![web_layer(scratch, "hostnet-nginx", "/usr/share/nginx/html")],
        ),
        // Apache's httpd: says `httpd` in its log (critest looks for it), serves on port 80.
        image(
            "e2e-test-images/httpd",
            &["2.4.39-4"],
            Config {
                cmd: &[
                    "sh",
                    "-c",
                    "echo 'httpd: serving /usr/local/apache2/htdocs on port 80'; \
                     exec httpd -f -p 80 -h /usr/local/apache2/htdocs",
                ],
                ..Config::default()
            },
            vec![web_layer(scratch, "httpd", "/usr/local/apache2/htdocs")],
        ),
        // A set-user-ID root program that prints its effective uid.
        image(
            "e2e-test-images/nonewprivs",
            &["1.3"],
            Config { cmd: &["/usr/local/bin/nnp"], ..Config::default() },
            vec![layer(
                scratch,
                "nonewprivs",
                &[("usr/local/bin/nnp".into(), Entry::File(fs::read(&nnp).unwrap(), 0o4755))],
            )],
        ),
    ];
    for n in 1..=3 {
        let name = format!("test-image-{n}");
        images.push(image(&cri_tools(&name), &["latest"], shell(), marked(&name)));
    }
    images
}

/// The images Kubernetes' node end-to-end suite (1.37) runs, under the repositories and tags its
/// image manifest names (`test/utils/image/manifest.go`), for the test registry that the suite's
/// `KUBE_TEST_REPO_LIST` points at. `agnhost` is the real program, built from the same module as
/// the suite (`tools/build-node-e2e.sh`), with its image's `/uploads`, `agnhost-2` link and
/// `user-defined-in-image` (uid 1000, in group 50000), on busybox rather than alpine (whose bash
/// and curl it adds: shell stand-ins `BASH` and `CURL`, busybox's applets for the rest); the
/// busybox images are
/// Debian's busybox-static; `nonroot` is busybox run as uid 1234 (its Dockerfile). Look-alikes,
/// where the real program is C with no source in the module proxy: `pause` (a Go program that
/// waits for SIGTERM), `nonewprivs` (a set-user-ID Go program printing its effective uid), nginx
/// (busybox httpd on port 80 under nginx's name), kitten/nautilus (agnhost with their page) and
/// glibc-dns-testing (busybox; the real one is Debian with dnsutils).
pub fn node_e2e_images(scratch: &Path, agnhost: &Path) -> Vec<Image> {
    let nnp = program("nnp");
    let pause = layer(scratch, "pause", &[("pause".into(), Entry::File(fs::read(program("pause")).unwrap(), 0o755))]);
    let base = base_layer(scratch);
    let agnhost = layer(
        scratch,
        "agnhost",
        &[
            ("agnhost".into(), Entry::File(fs::read(agnhost).unwrap(), 0o755)),
            ("agnhost-2".into(), Entry::HardLink("agnhost")),
            // The TLS pair of its HTTPS servers (`netexec --tls-cert-file=localhost.crt`).
            (
                "localhost.crt".into(),
                Entry::File(fs::read(agnhost.with_file_name("agnhost-localhost.crt")).unwrap(), 0o644),
            ),
            (
                "localhost.key".into(),
                Entry::File(fs::read(agnhost.with_file_name("agnhost-localhost.key")).unwrap(), 0o644),
            ),
            ("usr/bin/curl".into(), Entry::File(CURL.into(), 0o755)),
            ("bin/bash".into(), Entry::File(BASH.into(), 0o755)),
            ("uploads".into(), Entry::Dir(0o755)),
            (
                "etc/passwd".into(),
                Entry::File(
                    format!("{PASSWD}user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
                        .into_bytes(),
                    0o644,
                ),
            ),
            (
                "etc/group".into(),
                Entry::File(
                    format!(
                        "{GROUP}user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
                    )
                    .into_bytes(),
                    0o644,
                ),
            ),
            ("home/user-defined-in-image".into(), Entry::Dir(0o755)),
        ],
    );
    let image = |repository: &str, tags: &[&str], config: Config, extra: Vec<Vec<u8>>| {
        let mut layers = vec![base.clone()];
        layers.extend(extra);
        let config = config.json(scratch, &format!("{repository}:{}", tags[0]), &layers);
        Image { repository: repository.into(), tags: tags.iter().map(|t| t.to_string()).collect(), config, layers }
    };
    let agnhost_config = || Config { entrypoint: &["/agnhost"], cmd: &["pause"], ..Config::default() };
    let page = |name: &str| {
        let html = format!("<html><body><h1>{name}</h1></body></html>\n");
        layer(scratch, name, &[("html/index.html".into(), Entry::File(html.into_bytes(), 0o644))])
    };
    vec![
        image("pause", &["3.10.2", "3.10"], Config { entrypoint: &["/pause"], ..Config::default() }, vec![pause]),
        image("e2e-test-images/agnhost", &["2.66.1", "2.55"], agnhost_config(), vec![agnhost.clone()]),
        image("e2e-test-images/kitten", &["1.8"], agnhost_config(), vec![agnhost.clone(), page("kitten")]),
        image("e2e-test-images/nautilus", &["1.8"], agnhost_config(), vec![agnhost, page("nautilus")]),
        image(
            "e2e-test-images/busybox",
            &["1.37.0-2", "1.36.1-1", "1.29-2"],
            Config { cmd: &["sh"], ..Config::default() },
            Vec::new(),
        ),
        // glibc's resolver answers `hostname -f` from /etc/hosts there; busybox's here.
        image(
            "e2e-test-images/glibc-dns-testing",
            &["2.1.1"],
            Config { cmd: &["sh"], ..Config::default() },
            Vec::new(),
        ),
        image(
            "e2e-test-images/nonroot",
            &["1.5"],
            Config { cmd: &["sh"], user: "1234", ..Config::default() },
            Vec::new(),
        ),
        image(
            "e2e-test-images/nginx",
            &["1.27.0-2", "1.28.0-2"],
            Config {
                cmd: &["/usr/sbin/nginx", "nginx: master process nginx -g daemon off;"],
                env: &["NGINX_PORT=80"],
                ..Config::default()
            },
            vec![web_layer(scratch, "nginx", "/usr/share/nginx/html")],
        ),
        image(
            "e2e-test-images/nonewprivs",
            &["1.4"],
            Config { cmd: &["/usr/local/bin/nnp"], ..Config::default() },
            vec![layer(
                scratch,
                "nonewprivs",
                &[("usr/local/bin/nnp".into(), Entry::File(fs::read(&nnp).unwrap(), 0o4755))],
            )],
        ),
    ]
}

/// `curl [OPTIONS] URL`, in agnhost's look-alike (alpine's curl in the real image): busybox wget
/// fetches the URL to stdout, failing as curl does when the server cannot be reached. Options
/// are ignored, with the value of those that take one.
const CURL: &str = "#!/bin/sh\n# curl look-alike (agnhost's image has alpine's curl): busybox wget to stdout.\n\
                    url=\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in\n    \
                    -o|-m|-w|-X|-H|-d|--max-time|--connect-timeout|--output|--data|--header|--request) shift ;;\n    \
                    -*) ;;\n    *) url=$1 ;;\n  esac\n  shift\ndone\nexec wget -q -O - \"$url\"\n";

/// `bash`, in agnhost's look-alike: busybox's shell (the tests' scripts are POSIX sh).
const BASH: &str =
    "#!/bin/sh\n# bash look-alike (agnhost's image has alpine's bash): busybox sh.\nexec /bin/sh \"$@\"\n";

/// busybox's own image's users and groups, the ones critest's images name.
const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\n\
                      nobody:x:65534:65534:nobody:/home:/bin/false\n";
const GROUP: &str = "root:x:0:\nwww-data:x:33:\nnobody:x:65534:\n";

/// `pgrep NAME`: the pids of the processes whose name holds NAME; exits 1 when there is none.
const PGREP: &str = "#!/bin/sh\n# pgrep look-alike (busybox-static has none): pids whose process name holds $1.\n\
                     found=1\nfor d in /proc/[0-9]*; do\n  name=$(cat \"$d/comm\" 2>/dev/null) || continue\n  \
                     case \"$name\" in *\"$1\"*) echo \"${d#/proc/}\"; found=0 ;; esac\ndone\nexit $found\n";

/// `nmeter -d0 '%3t'`: the time of day with milliseconds, line after line without a pause (the
/// node e2e suite's containers timestamp their logs with it, through `head -n1`).
const NMETER: &str = "#!/bin/sh\n# nmeter look-alike (busybox-static has none): only %3t, HH:MM:SS.mmm in UTC, every -dMSEC\n\
                      # (-d0: at once; the loop ends when the reader does).\n\
                      pause=1\ncase \"$1\" in -d0) pause=0 ;; esac\n\
                      while :; do\n  set -- $(adjtimex | awk '/time.tv_sec/ { s = $2 } /time.tv_usec/ { u = $2 } \
                      END { print s, u }')\n  echo \"$(date -u -d @$1 +%T).$(printf %03d $(($2 / 1000)))\" || exit 0\n  \
                      [ $pause = 0 ] || sleep 1\ndone\n";

/// `ipcs -m`: this IPC namespace's shared memory segments, from /proc/sysvipc/shm.
const IPCS: &str = "#!/bin/sh\n# ipcs -m look-alike (busybox-static has none): the shared memory segments.\n\
                    echo '------ Shared Memory Segments --------'\necho 'key        shmid      owner      perms      bytes      nattch'\n\
                    awk 'NR > 1 { printf \"%-10s %-10s %-10s %-10s %-10s %-10s\\n\", $1, $2, $8, $3, $4, $7 }' /proc/sysvipc/shm\n";

/// A program of the look-alikes (`nnp`, `pause`), built by `tools/go-peers.sh`; fails (never
/// skips) with how to get it.
fn program(name: &str) -> PathBuf {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = top.join("target/peers/critest-images").join(name);
    assert!(path.is_file(), "{} is missing: run `bash tools/go-peers.sh` in {}", path.display(), top.display());
    path
}

/// An image config's parts that differ between the look-alikes.
#[derive(Default)]
struct Config {
    entrypoint: &'static [&'static str],
    cmd: &'static [&'static str],
    env: &'static [&'static str],
    user: &'static str,
}

impl Config {
    /// The OCI image config over `layers` (uncompressed: each diff ID is the layer's digest).
    fn json(&self, scratch: &Path, name: &str, layers: &[Vec<u8>]) -> Vec<u8> {
        let mut env = vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"];
        env.extend(self.env);
        let diff_ids: Vec<String> = layers.iter().map(|l| format!("sha256:{}", sha256_bytes(scratch, l))).collect();
        let mut config = serde_json::json!({
            "Env": env,
            "Labels": { "cri-bridge.test/look-alike-of": name },
        });
        if !self.entrypoint.is_empty() {
            config["Entrypoint"] = serde_json::json!(self.entrypoint);
        }
        if !self.cmd.is_empty() {
            config["Cmd"] = serde_json::json!(self.cmd);
        }
        if !self.user.is_empty() {
            config["User"] = serde_json::json!(self.user);
        }
        let image = serde_json::json!({
            "architecture": go_arch(),
            "os": "linux",
            "config": config,
            "rootfs": { "type": "layers", "diff_ids": diff_ids },
        });
        serde_json::to_vec(&image).unwrap()
    }
}

/// What a layer holds at a path.
enum Entry {
    File(Vec<u8>, u32),
    Dir(u32),
    /// A hard link to another path of the same layer (listed before it).
    HardLink(&'static str),
}

/// A layer (an uncompressed tar, owned by root) holding `entries`, staged under `scratch/name`.
fn layer(scratch: &Path, name: &str, entries: &[(String, Entry)]) -> Vec<u8> {
    let rootfs = scratch.join("layers").join(name);
    let _ = fs::remove_dir_all(&rootfs);
    fs::create_dir_all(&rootfs).unwrap();
    for (path, entry) in entries {
        let at = rootfs.join(path);
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        match entry {
            Entry::File(bytes, mode) => {
                fs::write(&at, bytes).unwrap();
                fs::set_permissions(&at, fs::Permissions::from_mode(*mode)).unwrap();
            }
            Entry::Dir(mode) => {
                fs::create_dir_all(&at).unwrap();
                fs::set_permissions(&at, fs::Permissions::from_mode(*mode)).unwrap();
            }
            Entry::HardLink(target) => fs::hard_link(rootfs.join(target), &at).unwrap(),
        }
    }
    let tar = scratch.join("layers").join(format!("{name}.tar"));
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "--sort=name", "-cf"])
        .arg(&tar)
        .arg("-C")
        .arg(&rootfs)
        .arg("."));
    fs::read(tar).unwrap()
}

/// busybox with every applet it has in /bin, hard links as in busybox's image (masking /bin/ls
/// must not mask the shell), busybox's users and groups, and the directories images have; and
/// for three applets Debian's busybox lacks, shell stand-ins: `pgrep NAME`, `ipcs -m` and
/// `nmeter '%3t'`.
fn base_layer(scratch: &Path) -> Vec<u8> {
    let applets = run(Command::new("/bin/busybox").arg("--list"));
    let mut entries: Vec<(String, Entry)> =
        vec![("bin/busybox".into(), Entry::File(fs::read("/bin/busybox").unwrap(), 0o755))];
    for applet in applets.lines().map(str::trim).filter(|a| !a.is_empty() && *a != "busybox") {
        entries.push((format!("bin/{applet}"), Entry::HardLink("bin/busybox")));
    }
    if !entries.iter().any(|(path, _)| path == "bin/pgrep") {
        entries.push(("bin/pgrep".into(), Entry::File(PGREP.into(), 0o755)));
    }
    if !entries.iter().any(|(path, _)| path == "bin/ipcs") {
        entries.push(("bin/ipcs".into(), Entry::File(IPCS.into(), 0o755)));
    }
    if !entries.iter().any(|(path, _)| path == "bin/nmeter") {
        entries.push(("bin/nmeter".into(), Entry::File(NMETER.into(), 0o755)));
    }
    entries.extend([
        ("etc/passwd".into(), Entry::File(PASSWD.into(), 0o644)),
        ("etc/group".into(), Entry::File(GROUP.into(), 0o644)),
        ("tmp".into(), Entry::Dir(0o1777)),
        ("root".into(), Entry::Dir(0o700)),
        ("home".into(), Entry::Dir(0o755)),
        ("var/run".into(), Entry::Dir(0o755)),
        ("var/www".into(), Entry::Dir(0o755)),
        ("usr/sbin".into(), Entry::Dir(0o755)),
    ]);
    layer(scratch, "busybox", &entries)
}

/// A web server's files: a page under `root`, and for nginx the stand-in that serves it.
fn web_layer(scratch: &Path, name: &str, root: &str) -> Vec<u8> {
    let root = root.trim_start_matches('/');
    let page = format!("<html><body><h1>{name} look-alike</h1></body></html>\n");
    let mut entries = vec![(format!("{root}/index.html"), Entry::File(page.into_bytes(), 0o644))];
    if name.ends_with("nginx") {
        // Run by the kernel as a script, so its process name is `nginx` (what `pidof` matches).
        let script =
            "#!/bin/sh\n# nginx look-alike: busybox httpd on $NGINX_PORT, this shell's pid in nginx's pid file.\n\
                      echo $$ > /var/run/nginx.pid\nhttpd -f -p \"$NGINX_PORT\" -h /usr/share/nginx/html &\nwait\n";
        entries.push(("usr/sbin/nginx".into(), Entry::File(script.as_bytes().to_vec(), 0o755)));
    }
    layer(scratch, name, &entries)
}
