//! Writes to a file descriptor that never wait long: what the markup
//! writer's sink sends its lines through.

/// Writes all of `bytes` to `fd`; on failure, how many bytes went out
/// before it. A full non-blocking descriptor (`EAGAIN`) gets
/// `wait_ms` milliseconds to take more.
pub(crate) fn write_all(fd: i32, bytes: &[u8], wait_ms: i32) -> Result<(), usize> {
    let mut sent = 0;
    while let Some(rest) = bytes.get(sent..).filter(|r| !r.is_empty()) {
        // SAFETY: `rest` is a valid slice for its length; write(2) is
        // async-signal-safe.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n > 0 {
            // write(2) never reports more than it was given.
            sent += (n as usize).min(rest.len());
        } else if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(e) if (e == libc::EAGAIN || e == libc::EWOULDBLOCK) && writable(fd, wait_ms) => {
                    continue
                }
                _ => return Err(sent),
            }
        } else {
            // 0 (nothing accepted) would loop forever; other errors are final.
            return Err(sent);
        }
    }
    Ok(())
}

/// Waits until `fd` takes more output (its reader caught up), for at most
/// `wait_ms` in all, however often a signal interrupts the wait;
/// `false` if it did not.
fn writable(fd: i32, wait_ms: i32) -> bool {
    let deadline = super::monotonic_ns() + wait_ms as u64 * 1_000_000;
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    loop {
        let left = deadline.saturating_sub(super::monotonic_ns());
        // Rounded up: poll(2) takes milliseconds, and 0 would not wait.
        let ms = left.div_ceil(1_000_000) as i32;
        if ms == 0 {
            return false;
        }
        // SAFETY: one valid pollfd; poll(2) is async-signal-safe.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n > 0 && p.revents & libc::POLLOUT != 0;
        }
    }
}

