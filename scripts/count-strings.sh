#!/usr/bin/env bash
# Counts, in non-test code under a source tree (default: src/), the two things issue 37 wants
# gone: `Result<_, String>` (the error is text; a thiserror type keeps its source) and string
# comparisons of the closed sets that travel as text (operation kind, gc candidate kind and
# outcome, a converge's module outcome). Test code is left out: a file's `#[cfg(test)]` and all
# below it (tests sit at the bottom here), and files named `*tests.rs`.
# The same measure before and after a change: `scripts/count-strings.sh <other checkout>/src`.
# tests/closed_sets.rs holds the same two counts as a ceiling, read with syn. Two more, from
# scripts/count-ideas.py: `to_string()` flattening of errors below the CLI, files of more than three ideas.
set -euo pipefail
root="${1:-$(dirname "$0")/../src}"
find "$root" -name '*.rs' ! -name '*tests.rs' | sort | perl -e '
my $words = qr/converge|force|send|rollback|unpin|promote|gc|tag|image|manifest|removed|untagged|deleted|already gone|failed|skipped|built|not reached|kept/;
my $word_lit = qr/"(?:$words)(?:[:( ][^"]*)?"/;
my ($results, $compares) = (0, 0);
my (%results_in, %compares_in);
while (my $file = <STDIN>) {
    chomp $file;
    open my $fh, "<", $file or die "$file: $!";
    local $/;
    my $text = <$fh>;
    $text =~ s/^#\[cfg\(test\)\].*//ms;
    # Comments say words; they compare nothing.
    $text =~ s{^\s*//.*$}{}mg;
    # Result<A, String>: the second of two top-level generic arguments is `String`.
    while ($text =~ /\bResult\s*(<((?:[^<>]++|(?1))*)>)/g) {
        my ($args, $at) = ($2, $-[0]);
        my ($depth, $start, @parts) = (0, 0);
        for my $i (0 .. length($args) - 1) {
            my $c = substr($args, $i, 1);
            $depth++ if $c eq "<" || $c eq "(";
            $depth-- if $c eq ">" || $c eq ")";
            if ($c eq "," && $depth == 0) { push @parts, substr($args, $start, $i - $start); $start = $i + 1; }
        }
        push @parts, substr($args, $start);
        if (@parts == 2 && $parts[1] =~ /^\s*(?:std::string::)?String\s*$/) { $results++; $results_in{$file}++; }
        # Nested results (Result<Result<_, String>, E>) are found by searching inside the match.
        pos($text) = $at + 6;
    }
    my $n = 0;
    $n += () = $text =~ /(?:==|!=)\s*$word_lit/g;
    $n += () = $text =~ /$word_lit\s*(?:==|!=)/g;
    while ($text =~ /matches!\s*(\((?:[^()]++|(?1))*\))/g) {
        my $body = $1;
        $n += () = $body =~ /$word_lit/g;
    }
    $n += () = $text =~ /\.(?:starts_with|strip_prefix|ends_with|eq)\(\s*$word_lit/g;
    $n += () = $text =~ /^\s*$word_lit(?:\s*\|\s*"[^"]*")*\s*=>/mg;
    $n += () = $text =~ /\.outcome\s*\.\s*split_once/g;
    if ($n) { $compares += $n; $compares_in{$file} = $n; }
}
if ($ENV{VERBOSE}) {
    print "  Result<_, String>: $_ $results_in{$_}\n" for sort keys %results_in;
    print "  closed-set string comparison: $_ $compares_in{$_}\n" for sort keys %compares_in;
}
print "Result<_, String> in non-test code: $results\n";
print "string comparisons of closed sets: $compares\n";
'
python3 "$(dirname "$0")/count-ideas.py" "$root"
