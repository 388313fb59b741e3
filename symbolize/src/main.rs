//! `stackmark-symbolize [--breakpad DIR]... [--gsym DIR]...
//! [--debug-file-directory DIR]... [--folded] [FILE]`: symbolizes the markup
//! in FILE (or standard input) onto standard output. See the crate's
//! documentation and `docs/symbolize.md`.

use std::io::{self, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use stackmark_symbolize::filter::{Filter, Mode};
use stackmark_symbolize::sources::{Source, Sources};

const USAGE: &str = "usage: stackmark-symbolize [--breakpad DIR]... [--gsym DIR]... \
[--debug-file-directory DIR]... [--folded] [FILE]
Symbolizes the symbolizer markup in FILE (default: standard input).
Sources are tried in the order given; each module is matched by build ID.";

fn main() -> ExitCode {
    let mut sources = Vec::new();
    let mut mode = Mode::Log;
    let mut file: Option<PathBuf> = None;
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
                eprintln!("stackmark-symbolize: {opt} needs a directory\n{USAGE}");
                return ExitCode::from(2);
            }
        }
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
