"""The speed goals judged on the stacks of distinct functions, for both of
`bench-goals.sh`'s tables of them: a run's and the spread's.

Each goal is a label, the walk whose time per frame is measured
(`(stack kind, bench)`), the walk that time is divided by (None: the time
itself is judged), the goal, whether the value must be at least it (else
at most), and the unit.
"""

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
    return value >= goal if at_least else value <= goal
