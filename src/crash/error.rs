//! Why the crash handler could not be installed.

/// Why the crash handler could not be installed.
#[derive(Debug)]
pub enum CrashError {
    /// The module table could not be built; nothing was installed.
    Init(crate::live::InitError),
    /// The handlers are installed, but the module table could not be
    /// rebuilt to learn the signal restorer they taught it (a walk guard
    /// held across two refreshes, say). Reports still work, but may not
    /// cross other handlers' signal frames; calling the install again
    /// retries the rebuild.
    Refresh(crate::live::InitError),
    /// A system call failed.
    Os(std::io::Error),
}

impl core::fmt::Display for CrashError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CrashError::Init(e) => write!(f, "building the module table: {e}"),
            CrashError::Refresh(e) => write!(
                f,
                "the crash handler is installed, but rebuilding the module table failed: {e}"
            ),
            CrashError::Os(e) => write!(f, "installing the crash handler: {e}"),
        }
    }
}

impl std::error::Error for CrashError {}
