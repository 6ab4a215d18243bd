"""`conformance.html`: the conformance report's answer as one page a person can scroll.

The same matrix as `conformance.md` (root causes x engine paths, by severity, sub-level rows
collapsed into one line), then each real defect: its paragraph (what the engine does, what the
checkpoint does, where in the engine, levels, repro) and, for a pixel defect, the diff picture of
its worst finding (expected | actual | amplified difference, the finding's own `diff.png`) inline as
a data URI, so the page is one file that can be mailed or attached to a CI run. No script is needed
to read it; one small script marks the body `data-rendered="ok"` once every picture has decoded
(`data-rendered="broken N"` otherwise), which the browser test reads back.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

from kimi_oracle.workflows.conformance_report import cell_text, defect_label, nothing_found, sub_level_lines
from kimi_oracle.workflows.conformance_summary import PIXEL, modes_text, summarize

# A diff picture larger than this is linked, not inlined (the page stays small enough to mail).
MAX_INLINE_BYTES = 2_000_000
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:1400px;color:#111}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #bbb;padding:4px 8px;vertical-align:top}
th{background:#eee;text-align:left}td.none{color:#999;text-align:center}td.pixel{background:#fde2e2}
td.crash{background:#fff1cc}td.finding{background:#e6eefc}td.error{background:#ddd;font-weight:bold}code{font-size:12px}
section.defect{border-top:1px solid #ccc;padding-top:.5em;margin-top:1.5em}img{max-width:100%;image-rendering:pixelated;
border:1px solid #ccc}p.sub{color:#555}
"""
_CHECK = """
window.addEventListener('load',function(){var bad=0,imgs=document.images;
for(var i=0;i<imgs.length;i++){if(!imgs[i].complete||imgs[i].naturalWidth===0){bad++;}}
document.body.setAttribute('data-rendered',bad?('broken '+bad):'ok');});
"""


def _e(text: Any) -> str:
    """Escaped text, Markdown's `code` spans as <code>."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(str(text if text is not None else "-")))


def _picture(path: str | None) -> str:
    if not path:
        return ""
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError:
        return f'<p class="sub">(diff picture {_e(path)} not found)</p>'
    if len(data) > MAX_INLINE_BYTES:
        return f'<p><a href="{_e(file.resolve().as_uri())}">diff picture</a> ({len(data)} bytes)</p>'
    src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return f'<p><img alt="expected | actual | amplified difference" src="{src}"></p>'


def _matrix(summary: dict[str, Any]) -> list[str]:
    columns = summary["columns"]
    if nothing_found(summary):
        return [f"<p>{_e(nothing_found(summary))}</p>"]
    out = ["<table><tr><th>root cause</th>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"]
    for name, cells, kind in summary["rows"]:
        tds = [f'<td class="{kind}">{"<br><small>".join(map(_e, cell_text(cells[c], kind).split(" · ", 1)))}</td>'
               if c in cells else '<td class="none">-</td>' for c in columns]
        out.append(f"<tr><th>{_e(name)}</th>{''.join(tds)}</tr>")
    out.append("</table>")
    return out


def render_html(report: dict[str, Any]) -> str:
    """The page (one self-contained HTML file)."""
    summary = summarize(report)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Engine conformance</title>", f"<style>{_STYLE}</style>", f"<script>{_CHECK}</script>",
           "</head><body>", "<h1>Engine conformance</h1>",
           f"<p>Made by <code>{_e(report.get('command', 'kimi-oracle conformance'))}</code> on "
           f"{_e(report.get('started', '?'))}. Exit code {_e(report.get('exit_code', '(running)'))}.</p>",
           "<h2>Root causes x engines</h2>", *_matrix(summary)]
    sub = sub_level_lines(summary)
    if sub:
        out.append(f'<p class="sub">{_e(sub[0])}</p><ul class="sub">' +
                   "".join(f"<li>{_e(line[2:])}</li>" for line in sub[1:] if line) + "</ul>")
    out.append(f"<h2>Real defects ({len(summary['defects'])})</h2><ol>")
    out += [f'<li><a href="#defect-{n}">{_e(d.column)}: {_e(d.row)}</a></li>'
            for n, d in enumerate(summary["defects"], 1)]
    out.append("</ol>")
    for n, d in enumerate(summary["defects"], 1):
        out += [f'<section class="defect" id="defect-{n}"><h3>{n}. {_e(d.column)}: {_e(d.row)}</h3>',
                f"<p>{_e(defect_label(d))}; mode classes {_e(modes_text(d.cell.modes, 40) or '-')}.</p>",
                f"<p><b>The engine:</b> {_e(d.does)}</p><p><b>The checkpoint:</b> {_e(d.checkpoint)}</p>",
                f"<p><b>Where:</b> <code>{_e(d.where)}</code></p>",
                f"<p><b>Repro:</b> <code>kimi-oracle repro {_e(d.cell.repro)}</code></p>",
                _picture(d.cell.picture) if d.kind == PIXEL else "", "</section>"]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


__all__ = ["MAX_INLINE_BYTES", "render_html"]
