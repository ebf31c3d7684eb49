//! `.dockerignore` matching, case by case against Docker's documented behaviour
//! (docs.docker.com "build context" / moby/patternmatcher).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use meshtop::workspace::ignore::{DockerIgnore, clean};

/// (the .dockerignore, the path, excluded?)
const CASES: &[(&str, &str, bool)] = &[
    // Docker's documentation examples.
    ("*/temp*", "somedir/temporary.txt", true),
    ("*/temp*", "somedir/temp", true),
    ("*/temp*", "temp.txt", false),
    ("*/temp*", "a/b/temp.txt", false),
    ("*/*/temp*", "somedir/subdir/temporary.txt", true),
    ("*/*/temp*", "somedir/temporary.txt", false),
    ("temp?", "tempa", true),
    ("temp?", "tempab", false),
    ("temp?", "temp", false),
    ("**/*.go", "main.go", true),
    ("**/*.go", "cmd/tool/main.go", true),
    ("**/*.go", "main.gox", false),
    ("*.md\n!README.md", "README.md", false),
    ("*.md\n!README.md", "CHANGES.md", true),
    ("*.md\n!README.md", "docs/guide.md", false),
    (
        "*.md\n!README*.md\nREADME-secret.md",
        "README-secret.md",
        true,
    ),
    (
        "*.md\n!README*.md\nREADME-secret.md",
        "README-public.md",
        false,
    ),
    (
        "*.md\nREADME-secret.md\n!README*.md",
        "README-secret.md",
        false,
    ),
    // Comments: only a `#` in column 0.
    ("# comment\n", "# comment", false),
    ("#*.txt", "a.txt", false),
    ("  # not a comment", "# not a comment", true),
    // Lines are trimmed; blank lines skipped.
    ("   a.txt   \n\n", "a.txt", true),
    // Cleaning: `dir/`, `./x`, `a/../b`, `//`, leading `/`.
    ("dir/", "dir", true),
    ("dir/", "dir/file", true),
    ("dir/", "dir/sub/file", true),
    ("dir/", "dirt", false),
    ("./a.txt", "a.txt", true),
    ("x/../b.txt", "b.txt", true),
    ("a//b", "a/b", true),
    ("/foo", "foo", true),
    ("/foo", "bar/foo", false),
    ("!/keep\n*", "keep", true),
    ("*\n!/keep", "keep", false),
    // A pattern that matches a parent excludes everything below it.
    ("build", "build/out/app.bin", true),
    ("build", "src/build", false),
    ("*/node_modules", "web/node_modules/x/y.js", true),
    // Exceptions below an excluded directory; the last match wins.
    ("dir\n!dir/keep.txt", "dir/keep.txt", false),
    ("dir\n!dir/keep.txt", "dir/other.txt", true),
    ("!a.txt\n*.txt", "a.txt", true),
    ("*.txt\n!a.txt", "a.txt", false),
    // `**`.
    ("**", "anything/at/all", true),
    ("**\n!keep", "keep", false),
    ("**\n!keep", "other", true),
    ("a/**/b", "a/b", true),
    ("a/**/b", "a/x/b", true),
    ("a/**/b", "a/x/y/b", true),
    ("a/**/b", "a/x/c", false),
    ("foo/**", "foo/x", true),
    ("foo/**", "foo/x/y", true),
    ("foo/**", "foo", false),
    ("**/secret", "secret", true),
    ("**/secret", "deep/down/secret", true),
    ("**/secret", "notsecret", false),
    ("**/secret", "secret/inner", true),
    // Classes and escapes.
    ("[a-c].txt", "b.txt", true),
    ("[a-c].txt", "d.txt", false),
    ("[^a-c].txt", "d.txt", true),
    ("[^a-c].txt", "a.txt", false),
    ("\\*.txt", "*.txt", true),
    ("\\*.txt", "a.txt", false),
    ("a?c", "a/c", false),
    ("a*c", "a/b/c", false),
    // Regexp metacharacters are literal.
    ("a.txt", "abtxt", false),
    ("a+b(c)|{d}$", "a+b(c)|{d}$", true),
    ("*.(tmp)", "x.(tmp)", true),
    ("*.(tmp)", "x.tmp", false),
];

#[test]
fn matches_like_docker() {
    let mut failures = Vec::new();
    for (file, path, want) in CASES {
        let ignore = DockerIgnore::parse(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        if ignore.is_excluded(path) != *want {
            failures.push(format!("{file:?} on {path:?}: expected excluded={want}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn parent_results_agree_with_full_matching() {
    for (file, path, want) in CASES {
        let ignore = DockerIgnore::parse(file).unwrap();
        let mut info = Default::default();
        let mut excluded = false;
        let mut prefix = String::new();
        for segment in path.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(segment);
            (excluded, info) = ignore.matches_with_parent(&prefix, &info);
        }
        assert_eq!(excluded, *want, "{file:?} on {path:?} walking down");
    }
}

#[test]
fn bad_patterns_are_errors_naming_the_line() {
    for (file, line) in [("ok\n!", 2), ("[abc", 1), ("a\nb\nfoo\\", 3), ("x[]", 1)] {
        let err = DockerIgnore::parse(file).unwrap_err();
        assert_eq!(err.line, line, "{file:?}: {err}");
        assert!(
            err.to_string()
                .starts_with(&format!(".dockerignore line {line}:")),
            "{err}"
        );
    }
}

#[test]
fn walk_enters_excluded_dirs_only_when_an_exception_may_reinclude() {
    let ignore = DockerIgnore::parse("node_modules\n!node_modules/keep\nvendor").unwrap();
    assert!(ignore.may_reinclude_under("node_modules"));
    assert!(!ignore.may_reinclude_under("vendor"));
    assert!(!ignore.may_reinclude_under("node"));
    let wild = DockerIgnore::parse("vendor\n!**/keep.go").unwrap();
    assert!(wild.may_reinclude_under("vendor"));
    let none = DockerIgnore::parse("vendor").unwrap();
    assert!(!none.may_reinclude_under("vendor"));
}

#[test]
fn always_send_adds_an_exception_only_when_needed() {
    let mut ignore = DockerIgnore::parse("*\n").unwrap();
    assert!(ignore.is_excluded("Dockerfile"));
    ignore.always_send("Dockerfile").unwrap();
    assert!(!ignore.is_excluded("Dockerfile"));
    assert!(ignore.is_excluded("other"));
    let before = ignore.patterns().len();
    ignore.always_send("Dockerfile").unwrap();
    assert_eq!(ignore.patterns().len(), before);
}

#[test]
fn clean_is_go_filepath_clean() {
    for (input, want) in [
        ("", "."),
        (".", "."),
        ("a/", "a"),
        ("./a/./b/", "a/b"),
        ("a/../..", ".."),
        ("../../x", "../../x"),
        ("/../x", "/x"),
        ("//a//b", "/a/b"),
        ("/", "/"),
    ] {
        assert_eq!(clean(input), want, "clean({input:?})");
    }
}

#[test]
fn utf8_bom_is_skipped() {
    let ignore = DockerIgnore::parse("\u{feff}secret\n").unwrap();
    assert!(ignore.is_excluded("secret"));
}
