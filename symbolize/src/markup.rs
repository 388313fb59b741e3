//! Symbolizer markup elements (`{{{...}}}`), split out of a line of text.
//!
//! Only the elements the symbolizer acts on are typed: `reset`, `module`,
//! `mmap`, `bt` and `pc`. Any other element is kept as text, as the markup
//! specification asks of a filter that does not know it.

/// Whether a code address is the precise pc or a return address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcKind {
    /// `:pc`: the exact address of an instruction (frame 0, a signal frame).
    Pc,
    /// `:ra`: a return address; it is looked up one byte back, inside the call.
    Ra,
    /// No suffix: frame 0 is taken as a pc, the others as return addresses.
    Unknown,
}

/// One typed markup element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Element {
    /// `{{{reset}}}`: forget every module and mapping.
    Reset,
    /// `{{{module:ID:NAME:elf:BUILDID}}}`.
    Module {
        /// The module's number.
        id: u64,
        /// The module's name (a path, for stackmark).
        name: String,
        /// The build ID's bytes.
        build_id: Vec<u8>,
    },
    /// `{{{mmap:ADDR:SIZE:load:MODULE:PERMS:VADDR}}}`.
    Mmap {
        /// Runtime start address.
        start: u64,
        /// Size in bytes.
        size: u64,
        /// The module it maps.
        module: u64,
        /// `r`, `w`, `x` letters.
        perms: String,
        /// The module-relative address of `start`.
        vaddr: u64,
    },
    /// `{{{bt:N:ADDR[:pc|:ra]}}}`: one frame of a backtrace.
    Bt {
        /// The frame number.
        frame: u64,
        /// The code address.
        addr: u64,
        /// What kind of address it is.
        kind: PcKind,
    },
    /// `{{{pc:ADDR[:pc|:ra]}}}`: a code address alone (profile stacks).
    Pc {
        /// The code address.
        addr: u64,
        /// What kind of address it is.
        kind: PcKind,
    },
}

/// A piece of a line: text, or an element with its byte range in the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text outside typed elements (unknown elements included).
    Text(&'a [u8]),
    /// A typed element, and where it starts in the line.
    Element(Element, usize),
}

/// A malformed element: where in the line, and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkupError {
    /// Byte offset of the element in its line.
    pub offset: usize,
    /// What was wrong.
    pub message: String,
}

/// Splits `line` into text and elements. A malformed element of a known
/// kind gives an error, and the line is then best kept as it is.
pub fn parse_line(line: &[u8]) -> Result<Vec<Piece<'_>>, MarkupError> {
    let mut pieces = Vec::new();
    let mut text_start = 0;
    let mut i = 0;
    while let Some(rel) = find(&line[i..], b"{{{") {
        let start = i + rel;
        let Some(len) = find(&line[start + 3..], b"}}}") else {
            // An unterminated element of a known kind is an error; other
            // text that happens to hold `{{{` is text.
            if known_tag(&line[start + 3..]).is_some() {
                return Err(MarkupError {
                    offset: start,
                    message: "element without its closing }}}".into(),
                });
            }
            break;
        };
        let body = &line[start + 3..start + 3 + len];
        let end = start + 3 + len + 3;
        match parse_element(body) {
            Ok(Some(e)) => {
                if text_start < start {
                    pieces.push(Piece::Text(&line[text_start..start]));
                }
                pieces.push(Piece::Element(e, start));
                text_start = end;
            }
            Ok(None) => {}
            Err(message) => {
                return Err(MarkupError {
                    offset: start,
                    message,
                })
            }
        }
        i = end;
    }
    if text_start < line.len() {
        pieces.push(Piece::Text(&line[text_start..]));
    }
    Ok(pieces)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn known_tag(body: &[u8]) -> Option<&'static str> {
    ["reset", "module", "mmap", "bt", "pc"]
        .into_iter()
        .find(|t| body.starts_with(t.as_bytes()) && matches!(body.get(t.len()), None | Some(b':')))
}

/// `Ok(None)` for an element this filter does not act on.
fn parse_element(body: &[u8]) -> Result<Option<Element>, String> {
    let Ok(body) = std::str::from_utf8(body) else {
        return if known_tag(body).is_some() {
            Err("element is not UTF-8".into())
        } else {
            Ok(None)
        };
    };
    let fields: Vec<&str> = body.split(':').collect();
    let e = match fields[0] {
        "reset" if fields.len() == 1 => Element::Reset,
        "reset" => return Err("reset takes no fields".into()),
        "module" => {
            if fields.len() < 4 {
                return Err("module needs ID:NAME:TYPE:...".into());
            }
            if fields[3] != "elf" {
                return Err(format!("module type {:?} is not elf", fields[3]));
            }
            let build_id = fields.get(4).ok_or("module without a build ID")?;
            Element::Module {
                id: int(fields[1], "module ID")?,
                name: fields[2].to_string(),
                build_id: hex_bytes(build_id)?,
            }
        }
        "mmap" => {
            if fields.len() != 7 || fields[3] != "load" {
                return Err("mmap needs ADDR:SIZE:load:MODULE:PERMS:VADDR".into());
            }
            let perms = fields[5];
            if perms.is_empty() || !perms.bytes().all(|b| matches!(b, b'r' | b'w' | b'x')) {
                return Err(format!("mmap permissions {perms:?}"));
            }
            Element::Mmap {
                start: addr(fields[1])?,
                size: int(fields[2], "mmap size")?,
                module: int(fields[4], "mmap module ID")?,
                perms: perms.to_string(),
                vaddr: addr(fields[6])?,
            }
        }
        "bt" => {
            if !(3..=4).contains(&fields.len()) {
                return Err("bt needs N:ADDR[:pc|:ra]".into());
            }
            Element::Bt {
                frame: int(fields[1], "bt frame number")?,
                addr: addr(fields[2])?,
                kind: kind(fields.get(3))?,
            }
        }
        "pc" => {
            if !(2..=3).contains(&fields.len()) {
                return Err("pc needs ADDR[:pc|:ra]".into());
            }
            Element::Pc {
                addr: addr(fields[1])?,
                kind: kind(fields.get(2))?,
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(e))
}

fn kind(f: Option<&&str>) -> Result<PcKind, String> {
    match f.copied() {
        None => Ok(PcKind::Unknown),
        Some("pc") => Ok(PcKind::Pc),
        Some("ra") => Ok(PcKind::Ra),
        Some(k) => Err(format!("address type {k:?} is neither pc nor ra")),
    }
}

/// `%p`: `0x` and hexadecimal digits.
fn addr(s: &str) -> Result<u64, String> {
    let digits = s
        .strip_prefix("0x")
        .ok_or_else(|| format!("address {s:?} without 0x"))?;
    u64::from_str_radix(digits, 16).map_err(|_| format!("address {s:?}"))
}

/// `%i`: decimal, or `0x` and hexadecimal digits.
fn int(s: &str, what: &str) -> Result<u64, String> {
    let v = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("{what} {s:?}"))
}

fn hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("build ID {s:?} is not hexadecimal bytes"));
    }
    Ok((0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bt_line_splits_into_element_and_method() {
        let p = parse_line(b"{{{bt:3:0x00ab:ra}}} sframe").unwrap();
        assert_eq!(
            p,
            vec![
                Piece::Element(
                    Element::Bt {
                        frame: 3,
                        addr: 0xab,
                        kind: PcKind::Ra
                    },
                    0
                ),
                Piece::Text(b" sframe"),
            ]
        );
    }

    #[test]
    fn unknown_elements_and_plain_braces_stay_text() {
        let line = b"x {{{symbol:_ZN3foo}}} y {{{ z";
        assert_eq!(parse_line(line).unwrap(), vec![Piece::Text(line)]);
    }

    #[test]
    fn malformed_known_elements_are_errors_with_their_offset() {
        for (line, at) in [
            (&b"ab {{{bt:1:1234:ra}}}"[..], 3),
            (b"{{{mmap:0x1000:0x10:load:0:rq:0x0}}}", 0),
            (b"  {{{bt:1:0x10:sp}}}", 2),
            (b"{{{module:0:x:elf:abc}}}", 0),
            (b"z {{{bt:0:0x10", 2),
        ] {
            assert_eq!(parse_line(line).unwrap_err().offset, at, "{line:?}");
        }
    }
}
