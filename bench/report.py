"""The suite's one table and its chart: every figure next to its baseline measured in the same run, and the
CPU share each side used (client tree / MySQL server / other processes; 100% = one core)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cpu import Measure


@dataclass
class Figure:
    section: str  # "snapshot", "planning", "catch-up", "latency", "memory", "mirror", "dag", "verify"
    what: str  # the measurement, with its configuration
    value: float | None
    unit: str  # of value and baseline: "rows/s", "s", "events/s", "MB"
    detail: str = ""  # more of the figure (MB/s, counts)
    cpu: Measure | None = None
    baseline_what: str = ""
    baseline: float | None = None
    baseline_detail: str = ""
    baseline_cpu: Measure | None = None
    higher_is_better: bool = True
    note: str = ""
    cpu_text: str = ""  # instead of cpu.compact() (a shared measurement, per-side figures)
    baseline_cpu_text: str = ""
    short: str = ""  # the chart's label (default: ``what``, shortened)

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline


@dataclass
class Report:
    header: list[str] = field(default_factory=list)  # lines above the table (machine, versions, sizes)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # lines below the table
    failures: list[str] = field(default_factory=list)


SECTION_TITLES = {
    "snapshot": "1. Snapshot",
    "planning": "2. Planning",
    "catch-up": "3. Catch-up",
    "latency": "4. Latency",
    "memory": "5. Chunk memory",
    "mirror": "6. Mirror refresh",
    "dag": "7. Example DAG",
    "verify": "8. Verify",
    "verify-cpu": "8. Verify: source CPU",
    "tables": "9. Many tables",
    "storage": "10. Storage after streaming",
}


def number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:,.2f} s" if value < 100 else f"{value:,.0f} s"
    if unit == "ms":
        return f"{value:,.1f} ms" if value < 100 else f"{value:,.0f} ms"
    if unit == "MB":
        return f"{value:,.1f} MB" if value < 100 else f"{value:,.0f} MB"
    return f"{value:,.0f} {unit}"


def cpu_cell(m: Measure | None, text: str) -> str:
    if text:
        return text
    return m.compact() if m is not None else "-"


def markdown(report: Report) -> str:
    lines = [*report.header, ""]
    lines.append("| section | measurement | figure | CPU client / server (other) | baseline, same run "
                 "| baseline figure | baseline CPU client / server (other) | ratio | note |")
    lines.append("|---|---|---:|---|---|---:|---|---:|---|")
    for f in report.figures:
        figure = number(f.value, f.unit) + (f"<br>{f.detail}" if f.detail else "")
        base = number(f.baseline, f.unit) + (f"<br>{f.baseline_detail}" if f.baseline_detail else "")
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        lines.append(f"| {SECTION_TITLES.get(f.section, f.section)} | {f.what} | {figure} | "
                     f"{cpu_cell(f.cpu, f.cpu_text)} | {f.baseline_what or '-'} | {base} | "
                     f"{cpu_cell(f.baseline_cpu, f.baseline_cpu_text)} | {ratio} | {f.note} |")
    for failure in report.failures:
        lines.append(f"| FAILED | {failure} | - | - | - | - | - | - | - |")
    if report.notes:
        lines += ["", *(f"- {note}" for note in report.notes)]
    return "\n".join(lines) + "\n"


def chart(report: Report, path: Path, title: str) -> None:
    """One panel per section: each measurement's figure and its baseline as horizontal bars, in the section's
    unit (sections mix throughput, seconds and MB, so they are not put on one axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    sections = [s for s in SECTION_TITLES
                if any(f.section == s and f.value is not None for f in report.figures)]
    if not sections:
        return
    heights = [max(1.6, 0.55 * sum(1 for f in report.figures if f.section == s) + 0.9) for s in sections]
    fig, axes = plt.subplots(len(sections), 1, figsize=(11, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, section in zip(axes[:, 0], sections):
        rows = [f for f in report.figures if f.section == section and f.value is not None]
        labels = [f.short or _short(f.what) for f in rows]
        ys = range(len(rows))
        ours = [f.value or 0.0 for f in rows]
        base = [f.baseline or 0.0 for f in rows]
        ax.barh([y + 0.2 for y in ys], ours, height=0.38, color="#1f77b4", label="mysqlcdc")
        ax.barh([y - 0.2 for y in ys], base, height=0.38, color="#bbbbbb", label="baseline (same run)")
        top = max([*ours, *base, 1e-9])
        for y, f in zip(ys, rows):
            ax.text((f.value or 0.0) + top * 0.01, y + 0.2,
                    number(f.value, f.unit) + _cpu_label(f.cpu, f.cpu_text), va="center", fontsize=7)
            if f.baseline is not None:
                ax.text(f.baseline + top * 0.01, y - 0.2,
                        number(f.baseline, f.unit) + _cpu_label(f.baseline_cpu, f.baseline_cpu_text),
                        va="center", fontsize=7)
        ax.set_yticks(list(ys), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, top * 1.25)
        better = "higher" if rows[0].higher_is_better else "lower"
        ax.set_title(f"{SECTION_TITLES[section]} ({rows[0].unit}, {better} is better)", fontsize=9,
                     loc="left")
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_formatter(
            matplotlib.ticker.StrMethodFormatter("{x:,.0f}" if top >= 10 else "{x:,.2f}")
        )
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=7, loc="upper right", ncols=2)
    fig.suptitle(f"{title}; bar labels: figure (CPU client / server, 100% = one core)", fontsize=9, x=0.02,
                 ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cpu_label(m: Measure | None, text: str) -> str:
    """`` (CPU 95% / 30%)``: client / server share, where the figure has its own measurement."""
    if m is None or text:
        return ""
    return f"  (CPU {m.share(m.client):.0%} / {m.share(m.server):.0%})"


def _short(text: str, width: int = 60) -> str:
    text = text.replace("**", "").replace("`", "")
    return text if len(text) <= width else text[: width - 1] + "…"
