use super::*;

fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn images(text: &str, given: &[(&str, &str)]) -> Vec<(String, usize)> {
    upstreams(text, &args(given), &BTreeMap::new())
        .into_iter()
        .map(|u| (u.image, u.line))
        .collect()
}

/// The shape of Online Boutique's Go services: a global ARG, a pinned builder, `--platform`, a
/// second external stage, `COPY --from` of a stage.
const BOUTIQUE_LIKE: &str = "\
# syntax=docker/dockerfile:1
ARG GO_VERSION=1.26
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-alpine AS builder
WORKDIR /src
COPY . .
RUN go build -o /app .

FROM alpine:3.21@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef AS certs

FROM gcr.io/distroless/static:nonroot
COPY --from=builder /app /app
COPY --from=certs /etc/ssl /etc/ssl
ENTRYPOINT [\"/app\"]
";

#[test]
fn every_external_stage_is_locked_and_nothing_else() {
    assert_eq!(
        images(BOUTIQUE_LIKE, &[]),
        vec![
            ("golang:1.26-alpine".to_string(), 3),
            ("gcr.io/distroless/static:nonroot".to_string(), 10),
        ]
    );
}

#[test]
fn a_build_arg_overrides_the_default_before_from() {
    assert_eq!(
        images(BOUTIQUE_LIKE, &[("GO_VERSION", "1.27")])[0].0,
        "golang:1.27-alpine"
    );
}

#[test]
fn scratch_the_mesh_base_and_stages_are_not_upstream() {
    let text =
        "ARG BASE\nFROM ${BASE} AS app\nFROM scratch\nCOPY --from=app /x /x\nCOPY --from=0 /y /y\n";
    assert!(images(text, &[("BASE", "demo/base:abc@sha256:00")]).is_empty());
    let plain = "ARG BASE\nFROM $BASE\n";
    assert!(images(plain, &[("BASE", "demo/base:abc")]).is_empty());
}

#[test]
fn copy_from_an_image_is_an_upstream() {
    let text = "FROM scratch\nCOPY --from=busybox:1.36 /bin/busybox /bin/busybox\n";
    let found = upstreams(text, &BTreeMap::new(), &BTreeMap::new());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].image, "busybox:1.36");
    assert_eq!(found[0].by, NamedBy::CopyFrom);
}

#[test]
fn continuations_comments_case_and_defaults_are_read_as_the_frontend_reads_them() {
    let text = "arg REG=registry.example:5000\n\
                # a comment\n\
                from \\\n\
                  # inside\n\
                  ${REG}/team/base:${TAG:-2} \\\n\
                  as build\n\
                FROM ${MISSING:+nope}python:3.12-slim\n";
    assert_eq!(
        images(text, &[]),
        vec![
            ("registry.example:5000/team/base:2".to_string(), 3),
            ("python:3.12-slim".to_string(), 7),
        ]
    );
}

#[test]
fn a_backtick_escape_joins_lines() {
    let text = "# escape=`\nFROM `\n  mcr.example/windows:ltsc\n";
    assert_eq!(
        images(text, &[]),
        vec![("mcr.example/windows:ltsc".to_string(), 2)]
    );
}

#[test]
fn pinning_keeps_flags_names_and_every_line_number() {
    let digest = |image: &str| match image {
        "golang:1.26-alpine" => Some("sha256:aaaa".to_string()),
        "gcr.io/distroless/static:nonroot" => Some("sha256:bbbb".to_string()),
        _ => None,
    };
    let out = pinned(BOUTIQUE_LIKE, &BTreeMap::new(), &BTreeMap::new(), digest);
    assert_eq!(out.lines().count(), BOUTIQUE_LIKE.lines().count());
    assert_eq!(
        out.lines().nth(2),
        Some("FROM --platform=$BUILDPLATFORM golang@sha256:aaaa AS builder")
    );
    assert_eq!(
        out.lines().nth(9),
        Some("FROM gcr.io/distroless/static@sha256:bbbb")
    );
    assert_eq!(
        out.lines().nth(7),
        BOUTIQUE_LIKE.lines().nth(7),
        "a pinned stage is left"
    );
    assert!(
        images(&out, &[]).is_empty(),
        "nothing is left to lock: {out}"
    );
}

#[test]
fn a_pinned_instruction_over_several_lines_keeps_the_lines_after_it_in_place() {
    let text = "FROM \\\n  python:3.12-slim \\\n  AS run\nRUN true\n";
    let out = pinned(text, &BTreeMap::new(), &BTreeMap::new(), |_| {
        Some("sha256:cc".to_string())
    });
    assert_eq!(out, "FROM python@sha256:cc AS run\n\n\nRUN true\n");
}

#[test]
fn copy_from_an_image_is_pinned() {
    let text = "FROM scratch\nCOPY --from=busybox:1.36 /bin/busybox /bin/busybox\n";
    let out = pinned(text, &BTreeMap::new(), &BTreeMap::new(), |_| {
        Some("sha256:dd".to_string())
    });
    assert_eq!(
        out,
        "FROM scratch\nCOPY --from=busybox@sha256:dd /bin/busybox /bin/busybox\n"
    );
}

#[test]
fn a_file_without_upstreams_is_sent_byte_for_byte() {
    let text = "ARG BASE\nFROM ${BASE}\r\nCOPY . /\n";
    assert_eq!(
        pinned(text, &args(&[("BASE", "x")]), &BTreeMap::new(), |_| Some(
            "sha256:ee".into()
        )),
        text
    );
}

#[test]
fn the_repository_drops_the_tag_not_the_port() {
    assert_eq!(repository("python:3.12-slim"), "python");
    assert_eq!(
        repository("127.0.0.1:5000/up/base:1"),
        "127.0.0.1:5000/up/base"
    );
    assert_eq!(repository("localhost:5000/base"), "localhost:5000/base");
    assert_eq!(repository("python"), "python");
}

#[test]
fn the_stages_a_target_may_name_are_read_as_the_frontend_reads_them() {
    let text = "# syntax=docker/dockerfile:1\nFROM scratch AS Build\nCOPY a /a\nfrom --platform=$BUILDPLATFORM \\\n  scratch as run\nFROM build\n";
    assert_eq!(stages(text), ["build", "run"]);
    assert!(stages("FROM scratch\n").is_empty());
}

/// bake's shape: `FROM base` and `COPY --from=lib` naming mesh modules by their contexts' names; a
/// stage of the same name as a context stays the stage.
#[test]
fn named_contexts_are_not_upstreams_and_are_replaced_by_the_builders_names() {
    let text = "\
FROM golang:1.26 AS build
COPY --from=lib /lib /lib
FROM base AS run
COPY --from=build /out /out
COPY --from=Lib /lib /lib2
";
    let contexts = args(&[("base", "base"), ("lib", "lib"), ("build", "tools")]);
    let found: Vec<String> = upstreams(text, &BTreeMap::new(), &contexts)
        .into_iter()
        .map(|u| u.image)
        .collect();
    assert_eq!(found, ["golang:1.26"]);
    let images = args(&[
        ("base", "reg/demo/base:aaaa"),
        ("lib", "reg/demo/lib:bbbb"),
        ("build", "reg/demo/tools:cccc"),
    ]);
    let out = pinned(text, &BTreeMap::new(), &images, |_| {
        Some("sha256:ff".into())
    });
    assert_eq!(
        out,
        "\
FROM golang@sha256:ff AS build
COPY --from=reg/demo/lib:bbbb /lib /lib
FROM reg/demo/base:aaaa AS run
COPY --from=build /out /out
COPY --from=reg/demo/lib:bbbb /lib /lib2
"
    );
}

/// What a build's image begins with: the base's layers only when the stage built is FROM the base,
/// directly or through the stages it is FROM (issue 51, case 6: the layers are checked then).
#[test]
fn the_stage_built_is_on_the_base_only_through_from() {
    let base = args(&[("BASE", "sha256:00")]);
    let none = BTreeMap::new();
    let on = |text: &str, target: Option<&str>| built_on_base(text, &base, &none, target);
    assert!(on("ARG BASE\nFROM ${BASE}\nCOPY . /\n", None));
    assert!(on("ARG BASE\nFROM $BASE AS Build\nFROM build\n", None));
    assert!(!on(
        "ARG BASE\nFROM ${BASE} AS build\nFROM scratch\nCOPY --from=build /x /x\n",
        None
    ));
    assert!(on(
        "ARG BASE\nFROM ${BASE} AS build\nFROM scratch AS out\n",
        Some("BUILD")
    ));
    assert!(!on("FROM scratch\n", None));
    assert!(!built_on_base(
        "ARG BASE\nFROM ${BASE}\n",
        &none,
        &none,
        None
    ));
}
