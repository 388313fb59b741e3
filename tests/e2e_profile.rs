//! The profiler example end to end, as the README runs it: a 1 s run at
//! 1000 Hz, its folded stacks turned into names by the real
//! `llvm-symbolizer --filter-markup` and the README's `sed`, then checked:
//! the markup context comes first, every sample is on a folded line, and
//! at least 95% of them name a hot function under its exact callers, the
//! 56 SFrame-only C frames of `c_recurse` among them. The sample lines
//! after the stacks give every sample its stack, thread and time.

#![cfg(target_os = "linux")]

mod common;

use std::path::Path;

/// `text` through `sed -E script`.
fn sed(script: &str, text: &str) -> String {
    let out = common::pipe(
        std::process::Command::new("sed").args(["-E", script]),
        text.as_bytes(),
    );
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The `# sample` lines: one per sample, each naming a folded line that
/// counts it, on one of the two named worker threads, in time order per
/// thread; then the end line.
fn check_sample_lines(text: &str, folded: &[&str], taken: u64) {
    let field = |l: &str, k: &str| -> u64 {
        let v = l.split(' ').find_map(|w| w.strip_prefix(k)).unwrap();
        v.parse().unwrap_or_else(|_| panic!("{k} in {l}"))
    };
    let mut per_stack = vec![0u64; folded.len()];
    let mut last_time = std::collections::HashMap::new();
    let mut n = 0;
    for l in text.lines().filter(|l| l.starts_with("# sample ")) {
        per_stack[field(l, "stack=") as usize] += 1;
        let (tid, t) = (field(l, "tid="), field(l, "time_ns="));
        let before = last_time.insert(tid, t).unwrap_or(0);
        assert!(t > before, "{l} after {before}");
        n += 1;
    }
    assert_eq!(n, taken);
    for (line, n) in folded.iter().zip(per_stack) {
        assert!(line.ends_with(&format!(" {n}")), "{n} samples of {line}");
    }
    let threads: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# thread "))
        .collect();
    assert_eq!(threads.len(), 2, "{threads:?}");
    for (w, tid) in ["worker-0", "worker-1"].iter().zip(&threads) {
        assert!(
            threads
                .iter()
                .any(|t| t.ends_with(&format!(" name=\"{w}\""))),
            "{tid}"
        );
    }
    assert!(text.ends_with(&format!("# end samples={taken}\n")));
}

/// The number after `label` in `text`.
fn number_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
        + label.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in {text}"))
}

#[test]
fn the_profile_example_folds_its_samples_into_symbolized_stacks() {
    let bin = common::examples_dir().join("profile");
    assert!(bin.exists(), "{} is built by cargo test", bin.display());
    let out = common::run_target_binary(&bin, &["1", "1000"], &[]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    let taken = number_after(&report, "profile: ");
    assert!(taken >= 500, "{report}");
    for line in [
        "µs per signal in the handler; ",
        "% of the CPU time",
        "work done ",
    ] {
        assert!(report.contains(line), "no {line:?} in {report}");
    }

    // The markup context, then one folded line per distinct stack.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("{{{reset}}}\n"), "{text}");
    let folded: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.starts_with("{{{reset")
                && !l.starts_with("{{{module:")
                && !l.starts_with("{{{mmap:")
                && !l.starts_with("# ")
        })
        .collect();
    assert!(
        text.contains("{{{module:") && text.contains("{{{mmap:"),
        "{text}"
    );
    let count = |l: &str| l.rsplit_once(' ').map(|(_, n)| n.parse::<u64>().unwrap());
    let total: u64 = folded
        .iter()
        .map(|l| count(l).unwrap_or_else(|| panic!("{l}")))
        .sum();
    assert_eq!(total, taken, "every sample on a folded line");
    check_sample_lines(&text, &folded, taken);

    let mut files = common::module_paths(&out.stdout);
    files.push(bin.clone());
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let tree = common::workdir("e2e-profile");
    common::build_id_tree(&tree, &refs);
    let (named, errors) = common::symbolize("llvm-symbolizer-19", &tree, &out.stdout);
    assert!(!errors.to_lowercase().contains("error"), "{errors}");
    // The README's `sed`: `; ` inside a name is not a boundary, and
    // `[file:line]` goes.
    let brackets = sed(r"s/; /, /g; s/\[[^][]*:[0-9]+\]//g", &named);
    let (mut good, mut rust, mut c) = (0, 0, 0);
    let mut bad = Vec::new();
    // As docs/profiling.md: the `# ` lines of the log are not stacks.
    let stacks = brackets
        .lines()
        .filter(|l| !l.starts_with("[[[ELF") && !l.starts_with("# "));
    for line in stacks {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        let hot: &[&str] = match frames.last() {
            Some(&"profile_rust_hot") => &["profile_leaf_work", "profile_rust_hot"],
            Some(&"c_hot_leaf") => &["profile_leaf_work", "c_hot_caller", "c_hot_leaf"],
            _ => &[],
        };
        let tail = 56 + hot.len();
        let exact = !hot.is_empty()
            && frames.len() > tail
            && frames[frames.len() - hot.len()..] == *hot
            && frames[frames.len() - tail..frames.len() - hot.len()]
                .iter()
                .all(|f| *f == "c_recurse")
            && frames[frames.len() - tail - 1] != "c_recurse";
        if exact {
            good += n;
            if hot.len() == 2 {
                rust += n;
            } else {
                c += n;
            }
        } else if bad.len() < 3 {
            bad.push(line.to_string());
        }
    }
    println!("profile: {taken} samples, {good} exact ({rust} in Rust, {c} in C)");
    assert!(
        good * 100 >= taken * 95,
        "{good} of {taken} exact; e.g. {bad:#?}"
    );
    assert!(
        rust * 10 >= taken && c * 10 >= taken,
        "{rust} in Rust, {c} in C of {taken}"
    );
}
