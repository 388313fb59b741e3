"""gdb's view of a crash, for tests/gdb_oracle.rs.

Run as `gdb -q -nx -batch -x physical_frames.py --args PROGRAM ARGS...`.
The program runs until a crash signal stops it, before the signal is
delivered; the script then prints the stopped thread's (the one the signal
is for) physical frames, innermost first, one line each:

    GDB-STOP <signal> lwp <thread id>
    GDB-FRAME <n> 0x<pc> <function, or ??> [<gdb frame type>]
    ...
    GDB-FRAMES-END <count> <why the walk ended, or "limit">

gdb's pc of a frame above the innermost is its return address. Inline and
tail-call frames, which gdb makes up from debug information and which have
no stack frame (nor a pc) of their own, are skipped. The program then goes
on: each crash signal is delivered to it, so its own crash handler writes
its report, and it dies. Every later stop prints a `GDB-STOP` line only;
the last line is `GDB-EXIT signal <number>`, `GDB-EXIT code <status>` or
`GDB-EXIT unknown ...`.

STACKMARK_GDB_MAX_FRAMES (default 1000) bounds the frames printed.

With STACKMARK_GDB_DUMP_SIGNAL set to a signal's gdb name (`SIG50`), the
signal a crash report interrupts the other threads with is passed to the
program, and at each stop for it the script prints that thread's physical
frames, as it is before its handler runs (the state the handler's
`ucontext` holds):

    GDB-THREAD <lwp>
    GDB-TFRAME <n> 0x<pc> <function, or ??> [<gdb frame type>]
    ...
    GDB-TFRAMES-END <count> <why the walk ended, or "limit">
"""

import os

import gdb

# Linux's numbers of the signals the crash handler reports.
CRASH_SIGNALS = {4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}
MAX_FRAMES = int(os.environ.get("STACKMARK_GDB_MAX_FRAMES", "1000"))
# A crash stops the program two or three times (the signal, then the fault
# again or the signal sent again once each handler is done); more than this
# means it is looping.
MAX_STOPS = 20
DUMP_SIGNAL = os.environ.get("STACKMARK_GDB_DUMP_SIGNAL")

# Frames gdb makes up from debug information: they share the pc of the
# physical frame around them and have no stack frame of their own.
VIRTUAL = (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME)

TYPE_NAMES = {
    gdb.NORMAL_FRAME: "normal",
    gdb.DUMMY_FRAME: "dummy",
    gdb.INLINE_FRAME: "inline",
    gdb.TAILCALL_FRAME: "tailcall",
    gdb.SIGTRAMP_FRAME: "sigtramp",
    gdb.ARCH_FRAME: "arch",
    gdb.SENTINEL_FRAME: "sentinel",
}

# The signal of each stop so far (None: a stop without one), and the
# program's exit, once it has ended.
stops = []
exits = []


def on_stop(event):
    """Records the signal of a stop. gdb reports a SIGTRAP it did not cause
    itself (the program's `int3`) as a plain stop, without the signal: the
    thread's siginfo tells then."""
    sig = getattr(event, "stop_signal", None)
    if sig is None:
        try:
            signo = int(gdb.parse_and_eval("$_siginfo.si_signo"))
            sig = CRASH_SIGNALS.get(signo, "signal %d" % signo)
        except gdb.error:
            pass
    stops.append(sig)


def on_exit(event):
    """Records how the program ended."""
    exits.append(event)


def out(line):
    """Prints one line and flushes it, so that it comes before anything the
    program writes once it runs again."""
    gdb.write(line + "\n", gdb.STDOUT)
    gdb.flush()


def print_frames(prefix="GDB-"):
    """Prints the selected thread's physical frames, innermost first, on
    lines `<prefix>FRAME` and `<prefix>FRAMES-END`."""
    frame = gdb.newest_frame()
    last = frame
    n = 0
    while frame is not None and n < MAX_FRAMES:
        if frame.type() not in VIRTUAL:
            kind = TYPE_NAMES.get(frame.type(), str(frame.type()))
            out("%sFRAME %d 0x%016x %s [%s]" % (prefix, n, frame.pc(), frame.name() or "??", kind))
            n += 1
        last = frame
        try:
            frame = frame.older()
        except gdb.error as e:
            out("GDB-NOTE older() failed: %s" % e)
            frame = None
    if frame is not None:
        why = "limit"
    else:
        why = gdb.frame_stop_reason_string(last.unwind_stop_reason())
    out("%sFRAMES-END %d %s" % (prefix, n, why))


def resume(command):
    """Resumes the program; false if gdb could not. With many threads, the
    group exit of the dying process can take a thread away while gdb reads
    its registers, and gdb fails every command after that."""
    try:
        gdb.execute(command)
        return True
    except gdb.error as e:
        out("GDB-NOTE %s: %s" % (command, e))
        return False


def main():
    """Runs the program to its end, printing the frames at the first crash."""
    for setting in (
        "set pagination off",
        "set confirm off",
        "set width 0",
        # Walk on below `main`, to `_start`.
        "set backtrace past-main on",
        # Never ask whether to download debug information.
        "set debuginfod enabled off",
    ):
        try:
            gdb.execute(setting, to_string=True)
        except gdb.error as e:
            out("GDB-NOTE %s: %s" % (setting, e))
    # Stop on each crash signal, and deliver it on `continue`. Not SIGTRAP,
    # which stays at gdb's default (stop, not passed): gdb's own breakpoints
    # (the dynamic linker's library events) stop the program with SIGTRAP
    # too, and with SIGTRAP passed, one of those kills the program at its
    # start. The program's own SIGTRAP is delivered with `signal SIGTRAP`.
    for sig in CRASH_SIGNALS.values():
        if sig != "SIGTRAP":
            gdb.execute("handle %s stop print pass" % sig, to_string=True)
    if DUMP_SIGNAL:
        gdb.execute("handle %s stop print pass" % DUMP_SIGNAL, to_string=True)
    gdb.events.stop.connect(on_stop)
    gdb.events.exited.connect(on_exit)

    gdb.execute("run")
    printed = False
    dump_stops = 0
    while (
        not exits
        and len(stops) - dump_stops <= MAX_STOPS
        and gdb.selected_thread() is not None
    ):
        sig = stops[-1] if stops else None
        if DUMP_SIGNAL and sig == DUMP_SIGNAL:
            dump_stops += 1
            out("GDB-THREAD %d" % gdb.selected_thread().ptid[1])
            print_frames("GDB-T")
            if not resume("continue"):
                break
            continue
        out("GDB-STOP %s lwp %d" % (sig, gdb.selected_thread().ptid[1]))
        if sig in CRASH_SIGNALS.values() and not printed:
            print_frames()
            printed = True
        if not resume("signal SIGTRAP" if sig == "SIGTRAP" else "continue"):
            break
    if not printed:
        out("GDB-NOTE the program never stopped on a crash signal")
    if not exits:
        out("GDB-EXIT unknown (%d stops)" % len(stops))
        try:
            gdb.execute("kill")
        except gdb.error as e:
            out("GDB-NOTE kill: %s" % e)
        return
    code = getattr(exits[-1], "exit_code", None)
    if code is not None:
        out("GDB-EXIT code %d" % code)
        return
    try:
        out("GDB-EXIT signal %d" % int(gdb.parse_and_eval("$_exitsignal")))
    except gdb.error:
        out("GDB-EXIT unknown (no exit code nor signal)")


main()
