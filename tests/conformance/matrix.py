"""The verdict of every case and phase, printed at the end of the session (and written to a file)."""
from __future__ import annotations

from collections import defaultdict

MATRIX_FILE = "/tmp/mysqlcdc-conformance-matrix.txt"

# "flavor group" -> case -> phase -> "ok" | "FAIL" | "skip" | a short fact
RESULTS: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
flavor = ""  # the server flavor of the test being run (tests/conformance/conftest.py sets it)
PHASES = {
    "types": ["identity", "compiled", "native", "arrow", "mirror", "mirror-wm", "digest"],
    "type-tables": ["chunks", "changes", "mirror", "backfilled", "mirror-wm"],
    "charsets": ["chars", "identity", "compiled", "native", "raw-bytes", "arrow", "mirror", "mirror-wm",
                 "key", "key-wm", "digest", "no-unicode"],
    "keys": ["chunks", "changes", "identity", "compiled", "mirror", "backfilled", "mirror-wm", "digest"],
}


# refused: a clear plan-time error, the way out tested; python: left to the pure-Python reader (native phase)
_COLUMNS = ("ok", "refused", "python", "FAIL", "skip", "-")


def record(group: str, case: str, phase: str, status: str) -> None:
    RESULTS[f"{flavor} {group}".strip()][case][phase] = status


def verdict(problems: list[str]) -> str:
    return "FAIL" if problems else "ok"


def render() -> str:
    lines = ["", "=== mysqlcdc conformance matrix ==="]
    for group, cases in RESULTS.items():
        phases = PHASES.get(group.split()[-1]) or sorted({p for c in cases.values() for p in c})
        counts = {p: defaultdict(int) for p in phases}
        for row in cases.values():
            for p in phases:
                status = row.get(p, "-")
                counts[p][status if status in ("FAIL", "skip", "-", "refused", "python") else "ok"] += 1
        lines.append(f"\n[{group}] {len(cases)} cases")
        lines.append("  phase        " + "  ".join(f"{k:>7}" for k in _COLUMNS))
        for p in phases:
            lines.append(f"  {p:<12} " + "  ".join(f"{counts[p][k]:>7}" for k in _COLUMNS))
        width = max(len(c) for c in cases) + 2
        lines.append("  " + "case".ljust(width) + " ".join(f"{p:>10}" for p in phases))
        for case, row in cases.items():
            lines.append("  " + case.ljust(width) + " ".join(f"{row.get(p, '-'):>10}" for p in phases))
    return "\n".join(lines) + "\n"
