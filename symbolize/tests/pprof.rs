//! `stackmark-symbolize --pprof` on the profile example's output, read by
//! the real `go tool pprof` (Debian's `golang-go`, installed by
//! `scripts/test.sh`):
//! - the unsymbolized profile: `-raw` lists the mappings of every module a
//!   sample lies in, each with the build ID of its markup `module`, and no
//!   functions; `-top` (with `PPROF_BINARY_PATH` set, symbolizing from the
//!   binaries) names the hot functions and their callers with the sample
//!   shares of the folded stacks, within 1 percentage point;
//! - the symbolized profile (`--debug-file-directory`), read with
//!   `-symbolize=none` so that no binary is opened: `-top` gives the same
//!   shares, and `-traces` the same stacks of those functions with the
//!   same counts;
//! - the `thread` label splits the samples exactly as the log's sample
//!   lines do (`-tags`, `-tagfocus`);
//! - a log cut short in a line, cut at a line boundary, or with a corrupt
//!   line: the error names the line, and the profile holds what came
//!   before it.

#![cfg(target_os = "linux")]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The functions compared: the two hot loops and their callers.
const HOT: [&str; 5] = [
    "profile_rust_hot",
    "c_hot_leaf",
    "c_hot_caller",
    "profile_leaf_work",
    "c_recurse",
];

fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

fn workdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "stackmark-symbolize-pprof-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn symbolize(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // An AArch64 build runs under qemu (the runner has no binfmt).
    support::run_target(
        Path::new(env!("CARGO_BIN_EXE_stackmark-symbolize")),
        &args,
        None,
    )
}

/// `go tool pprof ARGS`, which must succeed: its standard output.
fn pprof(args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut c = Command::new("go");
    c.args(["tool", "pprof"]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("go tool pprof: {e} (scripts/test.sh installs golang-go)"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pprof {args:?}: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One run of the example, shared by the tests.
struct Run {
    dir: PathBuf,
    log: String,
    log_file: PathBuf,
    /// Debug files by build ID: the example and the libraries it loaded.
    tree: PathBuf,
    /// Markup modules: file name -> build ID.
    modules: BTreeMap<String, String>,
    /// The folded stacks, symbolized: frames outermost first, count.
    folded: Vec<(Vec<String>, u64)>,
}

fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let bin = examples_dir().join("profile");
        assert!(
            bin.exists(),
            "{} is built by `cargo test --workspace`",
            bin.display()
        );
        let out = support::run_target(&bin, &["1", "1000"], None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = String::from_utf8(out.stdout).unwrap();
        let dir = workdir("run");
        let log_file = dir.join("profile.txt");
        std::fs::write(&log_file, &log).unwrap();
        let mut modules = BTreeMap::new();
        for l in log.lines() {
            if let Some(rest) = l.strip_prefix("{{{module:") {
                let f: Vec<&str> = rest.trim_end_matches("}}}").split(':').collect();
                modules.insert(f[1].to_string(), f[3].to_string());
            }
        }
        let tree = dir.join("tree");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-id-tree.sh");
        let files: Vec<&String> = modules.keys().filter(|f| Path::new(f).exists()).collect();
        let made = Command::new("bash")
            .arg(script)
            .arg(&tree)
            .args(files)
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let out = symbolize(&[
            &"--folded",
            &"--debug-file-directory",
            &tree,
            &"--debug-file-directory",
            &"/usr/lib/debug",
            &log_file,
        ]);
        assert!(out.status.success());
        let folded = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (stack, n) = l.rsplit_once(' ').unwrap();
                let frames = stack.split(';').map(String::from).collect();
                (frames, n.parse().unwrap())
            })
            .collect();
        Run {
            dir,
            log,
            log_file,
            tree,
            modules,
            folded,
        }
    })
}

impl Run {
    fn total(&self) -> u64 {
        self.folded.iter().map(|s| s.1).sum()
    }

    /// Percent of the samples that end in `f` (flat) and that hold `f`
    /// anywhere (cumulative), from the folded stacks.
    fn shares(&self, f: &str) -> (f64, f64) {
        let (mut flat, mut cum) = (0, 0);
        for (frames, n) in &self.folded {
            flat += n * u64::from(frames.last().is_some_and(|l| l == f));
            cum += n * u64::from(frames.iter().any(|l| l == f));
        }
        let t = self.total() as f64;
        (flat as f64 * 100.0 / t, cum as f64 * 100.0 / t)
    }

    /// The profile converted with `args` into `name`.
    fn convert(&self, name: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> PathBuf {
        let out_file = self.dir.join(name);
        let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"--pprof", &out_file];
        all.extend_from_slice(args);
        all.push(&self.log_file);
        let out = symbolize(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out_file
    }

    fn symbolized(&self) -> PathBuf {
        static SYM: OnceLock<PathBuf> = OnceLock::new();
        SYM.get_or_init(|| {
            self.convert(
                "sym.pb.gz",
                &[
                    &"--debug-file-directory",
                    &self.tree,
                    &"--debug-file-directory",
                    &"/usr/lib/debug",
                ],
            )
        })
        .clone()
    }
}

/// `-top`'s rows: function -> (flat%, cum%).
fn top(text: &str) -> HashMap<String, (f64, f64)> {
    let mut rows = HashMap::new();
    let body = text
        .split_once("flat%")
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no -top table in {text}"));
    for l in body.lines().skip(1) {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 6 {
            continue;
        }
        let pc = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap();
        rows.insert(w[5..].join(" "), (pc(w[1]), pc(w[4])));
    }
    rows
}

/// The hot functions' shares in `-top` agree with the folded stacks':
/// the cumulative share of each, and the flat share of the C hot loop.
/// The Rust one's flat share is compared only where pprof has inlined
/// frames (`inlined`): Go's own symbolizer reads one function per address,
/// so the range iterator inlined into `profile_rust_hot` counts as it.
fn assert_shares(run: &Run, text: &str, inlined: bool) {
    let rows = top(text);
    for f in HOT {
        let (flat, cum) = run.shares(f);
        let (pflat, pcum) = *rows.get(f).unwrap_or_else(|| panic!("no {f} in {text}"));
        println!("{f}: flat {pflat:.2}% (folded {flat:.2}%), cum {pcum:.2}% (folded {cum:.2}%)");
        assert!(
            (pcum - cum).abs() <= 1.0,
            "{f}: pprof {pcum}% cum, folded {cum}%"
        );
        if inlined || f != "profile_rust_hot" {
            assert!(
                (pflat - flat).abs() <= 1.0,
                "{f}: pprof {pflat}% flat, folded {flat}%"
            );
        }
    }
    // Both hot loops hold a real share, so agreement means something.
    for f in ["profile_rust_hot", "c_hot_leaf"] {
        assert!(run.shares(f).1 >= 10.0, "{f}: {:?}", run.shares(f));
    }
}

/// The total `-top` reports: `... of N total`.
fn total(text: &str) -> u64 {
    let at = text
        .find("% of ")
        .unwrap_or_else(|| panic!("no total in {text}"))
        + 5;
    let n: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    n.parse().unwrap()
}

#[test]
fn the_unsymbolized_profile_has_every_mapping_with_its_build_id_and_pprof_symbolizes_it() {
    let run = run();
    let raw = run.convert("raw.pb.gz", &[]);
    let raw = raw.to_str().unwrap();
    let text = pprof(&["-raw", "-symbolize=none", raw], &[]);
    let mappings: Vec<&str> = text
        .split_once("Mappings\n")
        .unwrap_or_else(|| panic!("no mappings in {text}"))
        .1
        .lines()
        .take_while(|l| !l.is_empty())
        .collect();
    // The modules the samples lie in: those of their stacks' frames.
    let mut used = std::collections::BTreeSet::new();
    let mut mmaps = Vec::new();
    for l in run.log.lines() {
        if let Some(rest) = l.strip_prefix("{{{mmap:") {
            let f: Vec<&str> = rest.trim_end_matches("}}}").split(':').collect();
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            mmaps.push((hex(f[0]), hex(f[1]), f[3].to_string()));
        }
    }
    let ids: HashMap<String, String> = run
        .log
        .lines()
        .filter_map(|l| l.strip_prefix("{{{module:"))
        .map(|r| {
            let f: Vec<&str> = r.split(':').collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect();
    for pc in run.log.split("{{{pc:0x").skip(1) {
        let pc = u64::from_str_radix(&pc[..16], 16).unwrap() - 1;
        if let Some(m) = mmaps.iter().find(|m| pc >= m.0 && pc - m.0 < m.1) {
            used.insert(ids[&m.2].clone());
        }
    }
    let mut listed = std::collections::BTreeSet::new();
    for m in &mappings {
        // N: 0xSTART/0xLIMIT/0xOFFSET FILE BUILDID [FLAGS]
        let w: Vec<&str> = m.split_whitespace().collect();
        let expected = run.modules.get(w[2]).unwrap_or_else(|| panic!("{m}"));
        assert_eq!(w.get(3), Some(&expected.as_str()), "{m}");
        listed.insert(w[2].to_string());
    }
    assert_eq!(listed, used, "{text}");
    assert!(listed.len() >= 2, "{listed:?}");
    // Addresses only: no function anywhere.
    for f in HOT {
        assert!(!text.contains(f), "{f} in {text}");
    }

    // pprof symbolizes it from the binaries, by build ID. Go's pprof
    // reads no build ID from a file, so it takes each mapping's own path,
    // where the binaries still are.
    let bins = run.dir.join("binaries");
    for (file, id) in &run.modules {
        if Path::new(file).exists() {
            let d = bins.join(id);
            std::fs::create_dir_all(&d).unwrap();
            let base = Path::new(file).file_name().unwrap();
            std::os::unix::fs::symlink(file, d.join(base)).unwrap();
        }
    }
    let text = pprof(
        &["-top", "-nodecount=1000", "-sample_index=samples", raw],
        &[("PPROF_BINARY_PATH", &bins)],
    );
    assert_eq!(total(&text), run.total(), "{text}");
    assert_shares(run, &text, false);
}

#[test]
fn the_symbolized_profile_names_the_same_functions_and_stacks_without_a_binary() {
    let run = run();
    let sym = run.symbolized();
    let sym = sym.to_str().unwrap();
    let text = pprof(
        &[
            "-top",
            "-symbolize=none",
            "-nodecount=1000",
            "-sample_index=samples",
            sym,
        ],
        &[],
    );
    assert_eq!(total(&text), run.total(), "{text}");
    assert_shares(run, &text, true);

    // -traces: each sample's stack, leaf first. Kept to the hot functions,
    // the stacks and their counts are the folded ones.
    let text = pprof(
        &["-traces", "-symbolize=none", "-sample_index=samples", sym],
        &[],
    );
    let mut traces: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for block in text.split("-----------+").skip(1) {
        let mut count = None;
        let mut frames = Vec::new();
        for l in block.lines().skip(1) {
            let l = l.trim();
            let l = l.strip_suffix(" (inline)").unwrap_or(l);
            if count.is_none() {
                match l.split_once(char::is_whitespace) {
                    Some((n, name)) if n.parse::<u64>().is_ok() => {
                        count = n.parse::<u64>().ok();
                        frames.push(name.trim().to_string());
                    }
                    _ => {} // a label line
                }
            } else if !l.is_empty() {
                frames.push(l.to_string());
            }
        }
        let Some(n) = count else { continue };
        frames.retain(|f| HOT.contains(&f.as_str()));
        *traces.entry(frames).or_default() += n;
    }
    let mut folded: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for (frames, n) in &run.folded {
        let hot: Vec<String> = frames
            .iter()
            .rev()
            .filter(|f| HOT.contains(&f.as_str()))
            .cloned()
            .collect();
        *folded.entry(hot).or_default() += n;
    }
    assert_eq!(traces, folded, "{text}");
    // The C hot loop's samples, leaf first, as the example calls it.
    let c = traces
        .keys()
        .find(|k| k.first().is_some_and(|f| f == "c_hot_leaf"))
        .expect("a C hot loop stack");
    assert_eq!(c[..3], ["c_hot_leaf", "c_hot_caller", "profile_leaf_work"]);
    assert_eq!(c.len(), 3 + 56, "{c:?}");
}

#[test]
fn the_thread_label_splits_the_samples_as_the_sample_lines_do() {
    let run = run();
    let mut names = HashMap::new();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for l in run.log.lines() {
        if let Some(r) = l.strip_prefix("# thread tid=") {
            let (tid, name) = r.split_once(" name=").unwrap();
            names.insert(tid.to_string(), name.trim_matches('"').to_string());
        }
    }
    for l in run.log.lines() {
        if let Some(r) = l.strip_prefix("# sample ") {
            let tid = r.split(' ').find_map(|w| w.strip_prefix("tid=")).unwrap();
            *expected.entry(names[tid].clone()).or_default() += 1;
        }
    }
    assert_eq!(expected.len(), 2, "{expected:?}");
    assert!(expected.values().all(|&n| n >= 100), "{expected:?}");
    let sym = run.symbolized();
    let sym = sym.to_str().unwrap();
    let text = pprof(
        &["-tags", "-symbolize=none", "-sample_index=samples", sym],
        &[],
    );
    let section = text
        .split_once("thread: Total")
        .unwrap_or_else(|| panic!("no thread label in {text}"))
        .1;
    let mut tags = BTreeMap::new();
    for l in section.lines().skip(1).take_while(|l| !l.trim().is_empty()) {
        // `   419.0 (52.77%): worker-1`
        let (n, rest) = l.trim().split_once(' ').unwrap();
        let name = rest.split_once("): ").unwrap().1;
        tags.insert(name.to_string(), n.parse::<f64>().unwrap() as u64);
    }
    assert_eq!(tags, expected, "{text}");
    for (name, n) in &expected {
        let focus = format!("-tagfocus=thread={name}");
        let text = pprof(
            &[
                "-top",
                "-symbolize=none",
                "-sample_index=samples",
                "-nodefraction=0",
                &focus,
                sym,
            ],
            &[],
        );
        assert!(
            text.contains(&format!("accounting for {n}, ")),
            "{name}: {text}"
        );
    }
}

#[test]
fn timestamps_keep_one_sample_per_sample_line_dated_within_the_run() {
    let run = run();
    let p = run.convert("times.pb.gz", &[&"--timestamps"]);
    let text = pprof(&["-raw", "-symbolize=none", p.to_str().unwrap()], &[]);
    let lines = run
        .log
        .lines()
        .filter(|l| l.starts_with("# sample "))
        .count();
    let stamps = text.matches("timestamp:[").count();
    assert_eq!(stamps, lines, "one pprof sample per sample line");
    // Wall-clock times, within the last minute, a second apart at most.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let times: Vec<u64> = text
        .split("timestamp:[")
        .skip(1)
        .map(|t| t.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let (first, last) = (times.iter().min().unwrap(), times.iter().max().unwrap());
    assert!(
        now - first < 60_000_000_000 && last <= &now,
        "{first} {last} {now}"
    );
    assert!(last - first < 1_100_000_000, "{first} {last}");
}

/// Converts `log` (unsymbolized); (exit code, stderr, samples in the
/// profile written).
fn convert_bad(name: &str, log: &str) -> (Option<i32>, String, u64) {
    let dir = &run().dir;
    let file = dir.join(format!("{name}.txt"));
    std::fs::write(&file, log).unwrap();
    let out_file = dir.join(format!("{name}.pb.gz"));
    let out = symbolize(&[&"--pprof", &out_file, &file]);
    let text = pprof(
        &[
            "-top",
            "-symbolize=none",
            "-sample_index=samples",
            out_file.to_str().unwrap(),
        ],
        &[],
    );
    let n = if text.contains("% of ") {
        total(&text)
    } else {
        0
    };
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        n,
    )
}

#[test]
fn a_truncated_or_corrupt_log_is_named_by_line_and_what_came_before_is_converted() {
    let run = run();
    let lines: Vec<&str> = run.log.lines().collect();
    let samples: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("# sample "))
        .collect();

    // Whole: every sample.
    let (code, err, n) = convert_bad("whole", &run.log);
    assert_eq!((code, n), (Some(0), samples.len() as u64), "{err}");

    // Cut inside a sample line: the lines before it.
    let cut = samples[samples.len() / 2];
    let mut text = lines[..cut].join("\n");
    text.push('\n');
    text.push_str(&lines[cut][..lines[cut].len() / 2]);
    let (code, err, n) = convert_bad("cut", &text);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cut.txt:{}: cut short: no newline", cut + 1)),
        "{err}"
    );
    assert_eq!(n, (samples.len() / 2) as u64, "{err}");

    // Cut at a line boundary, before the end line: every sample line kept.
    let text = lines[..lines.len() - 1].join("\n") + "\n";
    let (code, err, n) = convert_bad("no-end", &text);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "no-end.txt:{}: cut short: the log ends without",
            lines.len()
        )),
        "{err}"
    );
    assert_eq!(n, samples.len() as u64, "{err}");

    // A corrupt address in the second stack line: the first stack's count.
    let stacks: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("{{{pc:"))
        .collect();
    let mut bad: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    bad[stacks[1]] = bad[stacks[1]].replacen("{{{pc:0x", "{{{pc:0xg", 1);
    let (code, err, n) = convert_bad("corrupt", &(bad.join("\n") + "\n"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("corrupt.txt:{}: ", stacks[1] + 1)) && err.contains("0xg"),
        "{err}"
    );
    let first: u64 = lines[stacks[0]]
        .rsplit_once(' ')
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert_eq!(n, first, "{err}");

    // A sample line naming a stack that does not exist.
    let mut bad: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let at = samples[3];
    let rest = bad[at].split_once(" tid=").unwrap().1.to_string();
    bad[at] = format!("# sample stack=999 tid={rest}");
    let (code, err, n) = convert_bad("no-stack", &(bad.join("\n") + "\n"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("no-stack.txt:{}: stack 999", at + 1)),
        "{err}"
    );
    assert_eq!(n, 3, "{err}");
}
