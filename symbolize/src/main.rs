//! `stackmark-symbolize [--breakpad DIR]... [--gsym DIR]...
//! [--debug-file-directory DIR]... [--folded | --pprof OUT [--timestamps]]
//! [FILE]`: symbolizes the markup in FILE (or standard input) onto standard
//! output, or converts a profile log to a pprof file. See the crate's
//! documentation and `docs/symbolize.md`.

use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use stackmark_symbolize::filter::{Filter, Mode};
use stackmark_symbolize::sources::{Source, Sources};

const USAGE: &str = "usage: stackmark-symbolize [--breakpad DIR]... [--gsym DIR]... \
[--debug-file-directory DIR]... [--folded | --pprof OUT [--timestamps]] [FILE]
Symbolizes the symbolizer markup in FILE (default: standard input).
Sources are tried in the order given; each module is matched by build ID.
--pprof OUT converts a profile log to a gzipped pprof profile instead,
symbolized from the sources if any are given.";

fn main() -> ExitCode {
    let mut sources = Vec::new();
    let mut mode = Mode::Log;
    let mut file: Option<PathBuf> = None;
    let mut pprof_out: Option<PathBuf> = None;
    let mut timestamps = false;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        let s = a.to_string_lossy().into_owned();
        // `--opt=DIR` and `--opt DIR` both work, as in llvm-symbolizer.
        let (opt, inline) = match s.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(PathBuf::from(v))),
            _ => (s.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next().map(PathBuf::from));
        let src = match opt.as_str() {
            "--breakpad" => value().map(Source::Breakpad),
            "--gsym" => value().map(Source::Gsym),
            "--debug-file-directory" => value().map(Source::BuildId),
            "--folded" => {
                mode = Mode::Folded;
                continue;
            }
            "--timestamps" => {
                timestamps = true;
                continue;
            }
            "--pprof" => match value() {
                Some(out) => {
                    pprof_out = Some(out);
                    continue;
                }
                None => None,
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if s.starts_with('-') && s != "-" => {
                eprintln!("stackmark-symbolize: unknown option {s}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => {
                if file.replace(PathBuf::from(&a)).is_some() {
                    eprintln!("stackmark-symbolize: one input file at most\n{USAGE}");
                    return ExitCode::from(2);
                }
                continue;
            }
        };
        match src {
            Some(src) => sources.push(src),
            None => {
                eprintln!("stackmark-symbolize: {opt} needs a path\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let folded = mode == Mode::Folded;
    if (pprof_out.is_some() && folded) || (timestamps && pprof_out.is_none()) {
        eprintln!(
            "stackmark-symbolize: --pprof goes without --folded, --timestamps with --pprof\n{USAGE}"
        );
        return ExitCode::from(2);
    }
    let stdin = io::stdin();
    let (mut input, name): (Box<dyn io::BufRead>, String) = match &file {
        Some(p) if p.as_os_str() != "-" => match std::fs::File::open(p) {
            Ok(f) => (
                Box::new(BufReader::with_capacity(1 << 16, f)),
                p.display().to_string(),
            ),
            Err(e) => {
                eprintln!("stackmark-symbolize: {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        },
        _ => (Box::new(stdin.lock()), "<stdin>".to_string()),
    };
    if let Some(out) = pprof_out {
        let options = stackmark_symbolize::profile::Options { timestamps };
        return convert(&mut input, &name, Sources::new(sources), &out, options);
    }
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut err = io::stderr();
    let mut filter = Filter::new(Sources::new(sources), mode, &name);
    let r = filter
        .run(&mut input, &mut out, &mut err)
        .and_then(|()| out.flush());
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stackmark-symbolize: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--pprof OUT`: the profile log in `input` as a pprof file. A bad line
/// stops the reading; what came before it is still written, and the run
/// then fails.
fn convert(
    input: &mut dyn BufRead,
    name: &str,
    mut sources: Sources,
    out: &Path,
    options: stackmark_symbolize::profile::Options,
) -> ExitCode {
    use stackmark_symbolize::profile::{to_pprof, ProfileLog};
    let (log, error) = ProfileLog::read(input);
    let symbolize = !sources.list().is_empty();
    let profile = to_pprof(&log, symbolize.then_some(&mut sources), options);
    for w in sources.warnings.drain(..) {
        eprintln!("stackmark-symbolize: {w}");
    }
    if let Err(e) = std::fs::write(out, profile.to_gzip()) {
        eprintln!("stackmark-symbolize: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    match error {
        None => ExitCode::SUCCESS,
        Some(e) => {
            eprintln!(
                "stackmark-symbolize: {name}:{}: {}; the {} samples before it are in {}",
                e.line,
                e.message,
                log.samples(),
                out.display()
            );
            ExitCode::FAILURE
        }
    }
}
