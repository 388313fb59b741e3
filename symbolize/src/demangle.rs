//! Names as llvm-symbolizer prints them.
//!
//! llvm-symbolizer demangles `_Z` names with its Itanium demangler, which
//! knows nothing of Rust: a Rust legacy name keeps its hash and its `$LT$`
//! escapes (`core::ptr::write_volatile::h5e76ecb660dddbee`). `_R` names (Rust
//! v0) go through its Rust demangler, which prints no crate disambiguators.
//! The same two demanglers are used here, so that the names agree.

/// `name` demangled as llvm-symbolizer would; a name that is not mangled
/// (or that the demangler rejects) comes back unchanged.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_R") {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            // `{:#}` leaves out the crate hashes, as LLVM does.
            return format!("{d:#}");
        }
    } else if name.starts_with("_Z") {
        if let Some(d) = itanium(name) {
            return d;
        }
    }
    name.to_string()
}

fn itanium(name: &str) -> Option<String> {
    // A clone suffix (`.llvm.1234`, `.cold`) may follow the mangled name,
    // and LLVM prints it after the name in parentheses. A `.` can also sit
    // inside an identifier (Rust's `vtable.shim`), so the suffix starts at
    // the first `.` before which the name is a whole symbol and after
    // which only suffix pieces follow.
    for (i, _) in name.match_indices('.') {
        let (mangled, suffix) = name.split_at(i);
        if is_clone_suffix(suffix) {
            if let Some(d) = itanium_whole(mangled) {
                return Some(format!("{d} ({suffix})"));
            }
        }
    }
    itanium_whole(name)
}

/// `.name` and `.123` pieces, one or more.
fn is_clone_suffix(s: &str) -> bool {
    s.split('.').skip(1).all(|p| {
        !p.is_empty()
            && (p.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
                || p.bytes().all(|b| b.is_ascii_digit()))
    }) && s.starts_with('.')
}

fn itanium_whole(name: &str) -> Option<String> {
    let sym = cpp_demangle::Symbol::new(name).ok()?;
    let opts = cpp_demangle::DemangleOptions::new();
    sym.demangle_with_options(&opts).ok()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn rust_legacy_names_keep_hash_and_escapes_as_in_llvm() {
        assert_eq!(
            demangle("_ZN4core3ptr14write_volatile17h5e76ecb660dddbeeE"),
            "core::ptr::write_volatile::h5e76ecb660dddbee"
        );
    }

    #[test]
    fn clone_suffixes_follow_in_parentheses() {
        assert_eq!(
            demangle("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h6a2b1ac5322a0544E.llvm.13298522562053865401"),
            "std::rt::lang_start::_$u7b$$u7b$closure$u7d$$u7d$::h6a2b1ac5322a0544 (.llvm.13298522562053865401)"
        );
    }

    #[test]
    fn dots_inside_rust_identifiers_are_no_suffix() {
        assert_eq!(
            demangle("_ZN4core3ops8function6FnOnce40call_once$u7b$$u7b$vtable.shim$u7d$$u7d$17he8eb97f07587a439E"),
            "core::ops::function::FnOnce::call_once$u7b$$u7b$vtable.shim$u7d$$u7d$::he8eb97f07587a439"
        );
    }

    #[test]
    fn plain_names_stay() {
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot mangled"), "_Znot mangled");
    }
}
