//! README.md's "What the default gates" lists exactly the core's default keywords: the table a
//! user reads is the list the gate uses (issue 42).

use std::collections::BTreeSet;

#[test]
fn the_readme_lists_exactly_the_default_keywords() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme.split("### What the default gates").nth(1).expect("the section in README.md");
    let section = section.split("\n## ").next().unwrap();
    let table = section.split("| kind | keywords |").nth(1).expect("the keyword table");
    let listed: Vec<&str> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|row| row.rsplit('|').nth(1).unwrap().split('`').skip(1).step_by(2))
        .collect();
    let listed_set: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(listed.len(), listed_set.len(), "a keyword listed twice: {listed:?}");
    let core: BTreeSet<&str> = signoff::DEFAULT_KEYWORDS.iter().copied().collect();
    assert_eq!(listed_set, core, "README.md's table and signoff::DEFAULT_KEYWORDS differ");
    // The examples the section gives are what the policy says.
    let p = signoff::Policy::default();
    for gated in ["bash", "write_file", "git_push", "update_record", "merge_pr", "unlink"] {
        assert!(p.keyword_in(gated).is_some(), "{gated}");
    }
    for ungated in ["read_file", "list_directory", "search_docs", "git_status", "transmogrify"] {
        assert!(p.keyword_in(ungated).is_none(), "{ungated}");
    }
}
