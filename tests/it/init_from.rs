//! `meshtop init --from FILE` (issue 53) on fixtures in the shapes real files have
//! (`tests/it/fixtures/init/`): a compose file, a bake file and a skaffold file, each with tiny
//! Dockerfiles `FROM scratch`. The mesh each writes is planned by the real binary, and the plan
//! lists the modules, the edges and the machines a person reading the file expects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::mesh_file::write;
use crate::common::said;

/// The fixture `name` copied under `dir/<under>` (the directory's name is the compose project's).
fn fixture(dir: &Path, name: &str, under: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &to.join(entry.file_name()));
            } else {
                std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
            }
        }
    }
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/init")
        .join(name);
    let to = dir.join(under);
    copy(&from, &to);
    to
}

fn meshtop(args: &[&str], state: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--state")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

fn init(file: &Path, extra: &[&str]) -> Output {
    let state = file.parent().unwrap().join("state.db");
    let mut args = vec!["init", "--from", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    meshtop(&args, &state)
}

/// `meshtop plan --json` on `mesh`: module → (tier, base).
fn planned(mesh: &Path) -> BTreeMap<String, (u64, Option<String>)> {
    let state = mesh.parent().unwrap().join("state.db");
    let out = meshtop(
        &["--mesh", mesh.to_str().unwrap(), "plan", "--json"],
        &state,
    );
    assert!(out.status.success(), "plan: {}", said(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                (
                    m["tier"].as_u64().unwrap(),
                    m["base"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

fn expect(pairs: &[(&str, u64, Option<&str>)]) -> BTreeMap<String, (u64, Option<String>)> {
    pairs
        .iter()
        .map(|(n, t, b)| (n.to_string(), (*t, b.map(str::to_string))))
        .collect()
}

/// The mesh as meshtop reads it: each module's (dockerfile, target, args) and each machine.
fn loaded(mesh: &Path) -> meshtop::mesh::model::Mesh {
    meshtop::workspace::file::load(mesh).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_compose_file_gives_a_module_per_built_service_and_a_machine_per_service() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture(dir.path(), "compose", "Shop_Front");
    let out = init(&root.join("compose.yaml"), &[]);
    assert!(out.status.success(), "{}", said(&out));
    let told = said(&out);
    assert!(
        told.contains("mesh shop-front, 3 modules, 3 machines"),
        "{told}"
    );
    assert!(told.contains("renamed: web_ui → module web-ui"), "{told}");
    assert!(
        told.contains("service db: runs mariadb:10.6.4-focal, which no module builds"),
        "{told}"
    );
    assert!(
        told.contains("build arg CGO_ENABLED: not carried"),
        "{told}"
    );

    let mesh_file = root.join("mesh.toml");
    assert_eq!(
        planned(&mesh_file),
        expect(&[
            ("backend", 0, None),
            ("proxy", 0, None),
            ("web-ui", 1, None)
        ])
    );
    let mesh = loaded(&mesh_file);
    assert_eq!(mesh.name, "shop-front");
    let backend = mesh.module("backend").unwrap();
    assert_eq!(backend.target.as_deref(), Some("builder"));
    assert_eq!(
        backend.build_args,
        BTreeMap::from([("GO_VERSION".into(), "1.22".into())])
    );
    let web = mesh.module("web-ui").unwrap();
    assert_eq!(web.context, root.canonicalize().unwrap());
    assert_eq!(web.dockerfile, "frontend/Web.Dockerfile");
    assert_eq!(web.target.as_deref(), Some("prod"));
    // `additional_contexts: { api: service:backend }`: a named context on backend's module.
    assert_eq!(
        web.contexts,
        BTreeMap::from([("api".into(), "backend".into())])
    );
    assert_eq!(
        web.build_args,
        BTreeMap::from([
            ("API_URL".into(), "http://backend:8000".into()),
            ("NODE_ENV".into(), "production".into())
        ])
    );
    let machines: Vec<(&str, &str)> = mesh
        .machines
        .iter()
        .map(|m| (m.name.as_str(), m.module.as_str()))
        .collect();
    assert_eq!(
        machines,
        [
            ("backend", "backend"),
            ("proxy", "proxy"),
            ("web_ui", "web-ui")
        ]
    );
    let text = std::fs::read_to_string(&mesh_file).unwrap();
    for machine in ["backend", "proxy", "web_ui"] {
        let shape = format!("compose = {{ project = \"shop_front\", service = \"{machine}\" }}");
        assert!(text.contains(&shape), "{shape} in:\n{text}");
    }
    for comment in [
        "#   top-level `secrets`: compose's own",
        "# service db runs image mariadb:10.6.4-focal, which no module builds: no machine of the mesh",
        "# kept by compose, not written here: depends_on, expose, networks, secrets",
    ] {
        assert!(text.contains(comment), "{comment} in:\n{text}");
    }
}

#[test]
fn a_bake_file_resolves_inherits_and_variables_and_its_target_contexts_are_edges() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture(dir.path(), "bake", "platform");
    let out = init(&root.join("docker-bake.hcl"), &[]);
    assert!(out.status.success(), "{}", said(&out));
    let mesh_file = root.join("mesh.toml");
    // The metadata-action target and `_common` are only inherited: templates, no modules. `docs`
    // has an inline Dockerfile: said, not a module. Each `target:` context is an edge.
    assert_eq!(
        planned(&mesh_file),
        expect(&[
            ("runtime", 0, None),
            ("toolchain", 1, None),
            ("api", 2, None),
            ("worker", 2, None),
        ])
    );
    let mesh = loaded(&mesh_file);
    let contexts = |name: &str| {
        let module = mesh.module(name).unwrap();
        module
            .contexts
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>()
    };
    assert!(contexts("runtime").is_empty());
    assert_eq!(contexts("toolchain"), [("runtime", "runtime")]);
    assert_eq!(
        contexts("api"),
        [("runtime", "runtime"), ("toolchain", "toolchain")]
    );
    // `worker` inherits `api`'s contexts and args, over its own context and Dockerfile.
    assert_eq!(contexts("worker"), contexts("api"));
    let runtime = mesh.module("runtime").unwrap();
    assert_eq!(
        runtime.context,
        root.canonicalize().unwrap().join("images/runtime")
    );
    assert_eq!(runtime.target.as_deref(), Some("runtime"));
    let api = mesh.module("api").unwrap();
    assert_eq!(api.dockerfile, "build/Api.Dockerfile");
    // `_common`'s args under the target's own; `GO_VERSION` at its default.
    let args = BTreeMap::from([
        ("BUILD_FLAVOR".to_string(), "debug".to_string()),
        ("GO_VERSION".to_string(), "1.22".to_string()),
    ]);
    assert_eq!(api.build_args, args);
    let worker = mesh.module("worker").unwrap();
    assert_eq!(worker.build_args, args);
    assert_eq!(worker.dockerfile, "Dockerfile");
    let text = std::fs::read_to_string(&mesh_file).unwrap();
    for comment in [
        "# docs is not a module: its Dockerfile is inline",
        "# context assets = docker-image://busybox:1.36: not another target, not carried",
        "# `tags`: not carried (meshtop tags each build by its address)",
    ] {
        assert!(text.contains(comment), "{comment} in:\n{text}");
    }

    // The mesh builds as written, on the real daemon: each Dockerfile's `FROM runtime`,
    // `FROM toolchain` reaches the module's artifact.
    let name = crate::common::test_name("initbake");
    let _guard = crate::common::DaemonGuard(name.clone());
    std::fs::write(
        &mesh_file,
        text.replace("name = \"platform\"", &format!("name = \"{name}\"")),
    )
    .unwrap();
    let state = root.join("state.db");
    let converged = meshtop(
        &["--mesh", mesh_file.to_str().unwrap(), "converge", "--json"],
        &state,
    );
    assert!(converged.status.success(), "{}", said(&converged));
    let summary: serde_json::Value = serde_json::from_slice(&converged.stdout).unwrap();
    let decisions = crate::common::decisions(&summary);
    assert!(decisions.values().all(|d| d == "build"), "{decisions:?}");
    assert_eq!(decisions.len(), 4, "{decisions:?}");
}

#[test]
fn a_skaffold_file_of_two_documents_gives_its_artifacts_and_their_required_bases() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture(dir.path(), "skaffold", "shop");
    let out = init(&root.join("skaffold.yaml"), &[]);
    assert!(out.status.success(), "{}", said(&out));
    let mesh_file = root.join("mesh.toml");
    assert_eq!(
        planned(&mesh_file),
        expect(&[
            ("base-runtime", 0, None),
            ("cartservice", 0, None),
            ("emailservice", 0, None),
            ("frontend", 1, Some("base-runtime")),
            ("loadgenerator", 1, None),
        ])
    );
    let mesh = loaded(&mesh_file);
    assert_eq!(mesh.name, "boutique", "metadata.name of the first document");
    // The cart service's Dockerfile sits one folder deeper than the service's own.
    let cart = mesh.module("cartservice").unwrap();
    assert_eq!(
        cart.context,
        root.canonicalize().unwrap().join("src/cartservice/src")
    );
    let frontend = mesh.module("frontend").unwrap();
    assert_eq!(frontend.target.as_deref(), Some("release"));
    assert_eq!(
        frontend.build_args,
        BTreeMap::from([("PORT".into(), "8080".into())])
    );
    // Another alias than BASE: a named context of the required module, the alias naming it.
    let load = mesh.module("loadgenerator").unwrap();
    assert_eq!(
        load.contexts,
        BTreeMap::from([("base-runtime".into(), "base-runtime".into())])
    );
    assert_eq!(
        load.build_args,
        BTreeMap::from([("RUNTIME_IMAGE".into(), "base-runtime".into())])
    );
    let text = std::fs::read_to_string(&mesh_file).unwrap();
    for comment in [
        "# build arg GIT_COMMIT: not carried: {{.GIT_COMMIT}} is a template",
        "# requires base-runtime as BASE_IMAGE: its Dockerfile builds no stage FROM ${BASE_IMAGE}, so it is no edge",
    ] {
        assert!(text.contains(comment), "{comment} in:\n{text}");
    }
}

#[test]
fn an_existing_mesh_file_is_kept_unless_forced_and_out_writes_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture(dir.path(), "skaffold", "shop");
    // A git work tree: its mesh files may name contexts anywhere inside it (`..` included).
    std::fs::create_dir_all(root.join(".git")).unwrap();
    let mine = write(&root, "mesh.toml", "# my own mesh file\n");
    let refused = init(&root.join("skaffold.yaml"), &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", said(&refused));
    assert!(
        said(&refused).contains("a mesh file is there already — pass --force"),
        "{}",
        said(&refused)
    );
    assert_eq!(
        std::fs::read_to_string(&mine).unwrap(),
        "# my own mesh file\n"
    );

    // `--out` elsewhere: the contexts are written relative to where the mesh file is.
    let elsewhere = root.join("meshes");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = init(
        &root.join("skaffold.yaml"),
        &["--out", elsewhere.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", said(&out));
    let text = std::fs::read_to_string(elsewhere.join("mesh.toml")).unwrap();
    assert!(
        text.contains("context = \"../src/cartservice/src\""),
        "{text}"
    );
    assert_eq!(planned(&elsewhere.join("mesh.toml")).len(), 5);

    let forced = init(&root.join("skaffold.yaml"), &["--force"]);
    assert!(forced.status.success(), "{}", said(&forced));
    assert!(
        std::fs::read_to_string(&mine)
            .unwrap()
            .contains("[mesh]\nname = \"boutique\"")
    );
}

#[test]
fn a_file_that_does_not_parse_is_named_at_its_line_and_an_unknown_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "compose.yaml",
            "services:\n  web:\n    build: [web\n",
            3,
            "not valid YAML",
        ),
        (
            "docker-bake.hcl",
            "target \"web\" {\n  context = \n}\n",
            2,
            "not valid HCL",
        ),
        (
            "skaffold.yaml",
            "apiVersion: skaffold/v4beta11\nkind: Config\nbuild:\n  artifacts: [\n",
            4,
            "not valid YAML",
        ),
    ];
    for (name, text, line, what) in cases {
        let file = write(dir.path(), name, text);
        let out = init(&file, &[]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", said(&out));
        let told = said(&out);
        let at = format!("{}:{line}:", file.display());
        assert!(told.contains(&at) && told.contains(what), "{name}: {told}");
        assert!(
            !dir.path().join("mesh.toml").exists(),
            "nothing written for {name}"
        );
    }
    let old = write(
        dir.path(),
        "old/skaffold.yaml",
        "apiVersion: skaffold/v1beta2\nkind: Config\n",
    );
    let told = said(&init(&old, &[]));
    assert!(
        told.contains("apiVersion skaffold/v1beta2, which init does not read"),
        "{told}"
    );
    let other = write(dir.path(), "Makefile", "all:\n\ttrue\n");
    let out = init(&other, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        said(&out).contains("is no kind of file init reads — give a compose file (compose.yaml, docker-compose.yml), a bake file (docker-bake.hcl) or a skaffold file (skaffold.yaml)"),
        "{}",
        said(&out)
    );
}
