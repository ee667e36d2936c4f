"""``stackwalk report --html``: one static page of a crash store's buckets that works from
``file://`` without a network: a table sortable by any column (click its head; ``#sort=COLUMN``
or ``#sort=-COLUMN`` in the address sorts it on load), each bucket's example stack in a row that
opens, and a bar chart of the crashes per day of the biggest buckets (inline SVG)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from stackwalk.render import escape, stored_stack_lines
from stackwalk.store import Counts

# Buckets shown in the chart, each in its colour.
CHART_BUCKETS = 5
COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f")

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #ddd; vertical-align: top; }
th { cursor: pointer; background: #f4f4f4; user-select: none; }
th.sorted-up::after { content: " \\25B2"; } th.sorted-down::after { content: " \\25BC"; }
td.count { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 12px ui-monospace, monospace; }
pre { margin: 4px 0; white-space: pre-wrap; }
.legend span { display: inline-block; margin-right: 1em; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""

# Sorting: by the column's data-key values (numbers as numbers), each bucket's row and its
# stack's row moved together.
_SCRIPT = """
function sortBy(key, descending) {
  const body = document.querySelector('#buckets tbody');
  const rows = Array.from(body.querySelectorAll('tr.bucket'));
  const value = r => { const v = r.dataset[key]; return isNaN(v) ? v : Number(v); };
  rows.sort((a, b) => (value(a) < value(b) ? -1 : value(a) > value(b) ? 1 : 0) *
                      (descending ? -1 : 1));
  const pairs = rows.map(r => [r, r.nextElementSibling]);
  for (const [r, stack] of pairs) { body.appendChild(r); body.appendChild(stack); }
  for (const th of document.querySelectorAll('#buckets th')) {
    th.classList.remove('sorted-up', 'sorted-down');
    if (th.dataset.key === key) th.classList.add(descending ? 'sorted-down' : 'sorted-up');
  }
  document.body.dataset.sortedBy = (descending ? '-' : '') + key;
}
for (const th of document.querySelectorAll('#buckets th[data-key]')) {
  th.addEventListener('click', () =>
    sortBy(th.dataset.key, !th.classList.contains('sorted-down')));
}
const wanted = /^#sort=(-?)(\\w+)$/.exec(location.hash);
if (wanted) sortBy(wanted[2], wanted[1] === '-');
"""


def _text(text: str) -> str:
    """``text`` for the page: its control characters escaped as the text reports escape them
    (``stackwalk.render.escape``: a name's escape sequence is shown, not written raw into the
    file), then HTML's special characters. The JSON of the page's data keeps the names exact."""
    return html.escape(escape(text))


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d")


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")


def _chart(per_day: dict[str, dict[str, int]], buckets: list[dict[str, Any]]) -> str:
    """Stacked bars: crashes per day (UTC) of each of the biggest buckets."""
    shown = buckets[:CHART_BUCKETS]
    days = sorted(per_day)
    if not days:
        return "<p>No crashes to chart.</p>"
    totals = [sum(per_day[d].get(b["bucket"], 0) for b in shown) for d in days]
    top = max(totals) or 1
    width, height, bar_gap = 720, 200, 2
    bar = min(60, max(2, (width - 40) // len(days) - bar_gap))
    parts = [
        f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height + 40}" role="img" aria-label="crashes per day">'
    ]
    for i, day in enumerate(days):
        x, y = 40 + i * (bar + bar_gap), float(height)
        for b, colour in zip(shown, COLOURS, strict=False):
            n = per_day[day].get(b["bucket"], 0)
            if not n:
                continue
            h = n * (height - 10) / top
            y -= h
            parts.append(
                f'<rect class="bar" x="{x}" y="{y:.1f}" width="{bar}" height="{h:.1f}" '
                f'fill="{colour}"><title>{day}: {n} x {_text(b["signature"])}</title>'
                "</rect>"
            )
        if i == 0 or i == len(days) - 1:
            parts.append(f'<text x="{x}" y="{height + 15}" font-size="11">{day}</text>')
    parts.append(f'<text x="0" y="12" font-size="11">{top}</text>')
    parts.append(
        f'<line x1="38" y1="{height}" x2="{width}" y2="{height}" stroke="#999"></line></svg>'
    )
    legend = "".join(
        f'<span><i style="background:{c}"></i>{_text(b["signature"])}</span>'
        for b, c in zip(shown, COLOURS, strict=False)
    )
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _stack(example: dict[str, Any] | None) -> str:
    if not example:
        return ""
    lines = stored_stack_lines(example)  # escaped already, one line each
    where = _text(example["path"])
    return f"<div>e.g. <code>{where}</code></div><pre>{html.escape(chr(10).join(lines))}</pre>"


def render(
    buckets: list[dict[str, Any]],
    per_day: dict[str, dict[str, int]],
    title: str,
    counts: Counts | None = None,
    not_crashes: Sequence[tuple[str, str]] = (),
) -> str:
    """The page. ``buckets``: CrashStore.buckets() with each one's ``example`` crash (the
    biggest, or all); ``per_day``: {day: {bucket: crashes}}; ``counts``: the store's totals
    (``CrashStore.counts``, which ``stackwalk triage`` prints too; by default, the buckets'),
    ``not_crashes``: (path, why) of each file stored that is not a crash
    (``CrashStore.errors``), listed under the table."""
    rows = []
    for rank, b in enumerate(buckets, 1):
        builds = ", ".join(
            f"{count} x {_text(exe or '?')} {_text(build_id or '')}"
            for exe, build_id, count in b["builds"]
        )
        data = {
            "rank": rank, "count": b["count"], "signature": b["signature"],
            "first": b["first_seen"], "last": b["last_seen"],
        }  # fmt: skip
        attrs = " ".join(f'data-{k}="{_text(str(v))}"' for k, v in data.items())
        rows.append(
            f'<tr class="bucket" {attrs}><td class="count">{rank}</td>'
            f'<td class="count">{b["count"]}</td>'
            f"<td><details><summary><code>{_text(b['signature'])}</code></summary>"
            f"</details></td><td>{_time(b['first_seen'])}</td><td>{_time(b['last_seen'])}</td>"
            f"<td>{builds}</td></tr>"
            f'<tr class="stack"><td></td><td colspan="5">{_stack(b.get("example"))}</td></tr>'
        )
    if counts is None:
        counts = Counts(sum(b["count"] for b in buckets), len(buckets), len(not_crashes))
    head = "".join(
        f'<th data-key="{key}">{label}</th>'
        for key, label in (
            ("rank", "#"), ("count", "Crashes"), ("signature", "Signature"),
            ("first", "First seen (UTC)"), ("last", "Last seen (UTC)"),
        )
    ) + "<th>Builds</th>"  # fmt: skip
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_text(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{_text(title)}</h1>"
        f"{_summary(counts, len(buckets))}"
        f"<h2>Crashes per day, the {min(len(buckets), CHART_BUCKETS)} biggest buckets</h2>"
        f"{_chart(per_day, buckets)}"
        f"<h2>Buckets</h2><table id='buckets'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        f"{_not_crashes(not_crashes)}"
        # The stack rows open with their bucket's <details>.
        "<script>"
        "for (const d of document.querySelectorAll('tr.bucket details')) {"
        " const stack = d.closest('tr').nextElementSibling;"
        " const show = () => { stack.style.display = d.open ? '' : 'none'; };"
        " d.addEventListener('toggle', show); show(); }"
        f"{_SCRIPT}</script>"
        f"<script type='application/json' id='data'>{_json(buckets)}</script>"
        "</body></html>"
    )


def _summary(counts: Counts, shown: int) -> str:
    """The page's totals, as ``stackwalk triage`` says them (and in data- attributes)."""
    part = f" (the {shown} biggest below)" if shown < counts.buckets else ""
    data = " ".join(f'data-{k.replace("_", "-")}="{v}"' for k, v in counts._asdict().items())
    return (
        f"<p id='summary' {data}>{counts.crashes} crashes in {counts.buckets} buckets{part}, "
        f"{counts.not_crashes} files that are not crashes.</p>"
    )


def _not_crashes(files: Sequence[tuple[str, str]]) -> str:
    """The files stored that are not crashes, each with why."""
    if not files:
        return ""
    items = "".join(f"<li><code>{_text(path)}</code>: {_text(why)}</li>" for path, why in files)
    return f"<h2>Files that are not crashes</h2><ul id='not-crashes'>{items}</ul>"


def _json(buckets: list[dict[str, Any]]) -> str:
    slim = [{k: b[k] for k in ("bucket", "signature", "count")} for b in buckets]
    return json.dumps(slim).replace("</", "<\\/")
