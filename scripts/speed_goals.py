"""The stacks of distinct functions, the walks timed on them and the speed
goals judged there, for both of `bench-goals.sh`'s tables of them: a
run's and the spread's.

Each goal in `SPEED_GOALS` is a label, the walk whose time per frame is measured
(`(stack kind, bench)`), the walk that time is divided by (None: the time
itself is judged), the goal, whether the value must be at least it (else
at most), and the unit.
"""

DEPTHS = (16, 64, 256)

# libunwind and framehop run on x86_64 only: a run whose log never names
# them did not run them. Anything else must be there.
OPTIONAL = {"libunwind", "framehop"}

# Each walk timed on the stacks of distinct functions: its label, the
# stack's kind (the bench group's name without the depth), its bench, and
# whose frame count it walks (a cold walk walks the warm one's frames).
DISTINCT = [
    ("stackmark, SFrame", "distinct", "stackmark/sframe", "stackmark/sframe"),
    ("stackmark, SFrame, cold", "distinct", "stackmark/sframe-cold", "stackmark/sframe"),
    ("libunwind `unw_backtrace`", "distinct", "libunwind", "libunwind"),
    ("framehop (`.eh_frame`)", "distinct", "framehop", "framehop"),
    ("stackmark, frame pointers", "distinct-fp", "stackmark/fp", "stackmark/fp"),
    ("libunwind `unw_backtrace`", "distinct-fp", "libunwind", "libunwind"),
    ("framehop (`.eh_frame`)", "distinct-fp", "framehop", "framehop"),
]


def build(kind):
    """How the stack of `kind` was built."""
    return "SFrame, no frame pointers" if kind == "distinct" else "frame pointers, no SFrame"


SF, FP = ("distinct", "stackmark/sframe"), ("distinct-fp", "stackmark/fp")

SPEED_GOALS = [
    ("SFrame frames: ≥ 3× faster than libunwind", ("distinct", "libunwind"), SF, 3, True, "×"),
    ("SFrame frames: ≥ 3× faster than framehop", ("distinct", "framehop"), SF, 3, True, "×"),
    ("frame-pointer frames: ≥ 3× faster than libunwind", ("distinct-fp", "libunwind"), FP, 3, True, "×"),
    ("SFrame walk ≤ 1.5× our frame-pointer walk, per frame", SF, FP, 1.5, False, "×"),
    ("cold SFrame walk ≤ 50 ns per frame", ("distinct", "stackmark/sframe-cold"), None, 50, False, " ns"),
]


def fmt(x):
    """A figure to three significant digits or so."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def met(value, goal, at_least):
    """Whether `value` meets `goal`: at least it, or at most it."""
    return value >= goal if at_least else value <= goal
