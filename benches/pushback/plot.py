"""Draws the push-back bench's JSON (benches/pushback/run.sh) as an SVG.

One panel per server limit: the 200s (2xx) per second each client got over time (a sliding 1 s
window, centred), the server's limit as a dashed line, and each client's 429s as ticks under
the axis (one tick per 100 ms bin with at least one 429).

    python3 benches/pushback/plot.py target/pushback.json docs/pushback.svg

Python's standard library only.
"""

import json
import math
import sys
from html import escape

WIDTH = 800
LEFT, RIGHT = 64, 16  # plot area margins
PLOT_H = 170  # height of one panel's plot area
TICK_ROW = 9  # height of one client's row of 429 ticks
WINDOW_S = 1.0  # the sliding window the rate is counted over

CLIENTS = [  # (client_id in the JSON, legend, colour)
    ("configured", "tower-throttle, configured at 2× the limit", "#0072B2"),
    ("adaptive", "tower-throttle, adaptive (no rate)", "#009E73"),
    ("botocore", "botocore adaptive", "#D55E00"),
]
FONT = 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif"'


def rate_over_time(ok, bin_s):
    """(t, 2xx per second) at each bin's centre, over a centred window cut at the ends."""
    half = max(1, round(WINDOW_S / bin_s / 2))
    prefix = [0]
    for n in ok:
        prefix.append(prefix[-1] + n)
    points = []
    for i in range(len(ok)):
        lo, hi = max(0, i - half), min(len(ok), i + half)
        points.append(((i + 0.5) * bin_s, (prefix[hi] - prefix[lo]) / ((hi - lo) * bin_s)))
    return points


def nice_step(span, ticks=5):
    """A step of 1, 2 or 5 × 10^k giving about `ticks` intervals over `span`."""
    raw = span / ticks
    k = 10 ** math.floor(math.log10(raw))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= raw)


def fmt(x):
    return f"{x:g}"


def panel(out, top, title, server_rps, runs, x_max, duration_s):
    """Draws one panel with its plot area's top at `top`; returns the panel's bottom."""
    x0, x1 = LEFT, WIDTH - RIGHT
    y0, y1 = top + 22, top + 22 + PLOT_H  # plot area: y0 at the top
    series = {cid: rate_over_time(r["series"]["ok"], r["series"]["bin_s"]) for cid, r in runs.items()}
    peak = max([server_rps] + [v for pts in series.values() for _, v in pts])
    y_step = nice_step(peak * 1.15)
    y_max = y_step * math.ceil(peak * 1.15 / y_step)

    def sx(t):
        return x0 + (x1 - x0) * t / x_max

    def sy(v):
        return y1 - (y1 - y0) * v / y_max

    out.append(f'<text x="{x0}" y="{top + 14}" font-size="14" font-weight="bold" {FONT}>{escape(title)}</text>')
    # Grid and y axis.
    v = 0.0
    while v <= y_max + 1e-9:
        y = sy(v)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-size="12" text-anchor="end" {FONT}>{fmt(v)}</text>')
        v += y_step
    x_step = nice_step(x_max, 10)
    t = 0.0
    while t <= x_max + 1e-9:
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="#f0f0f0"/>')
        t += x_step
    cy = (y0 + y1) / 2
    out.append(
        f'<text x="16" y="{cy:.1f}" font-size="12" text-anchor="middle" transform="rotate(-90 16 {cy:.1f})" {FONT}>'
        "200s per second</text>"
    )
    # The end of the run: no request starts after it.
    xd = sx(duration_s)
    out.append(f'<line x1="{xd:.1f}" y1="{y0}" x2="{xd:.1f}" y2="{y1}" stroke="#999" stroke-dasharray="2 3"/>')
    # The server's limit.
    yl = sy(server_rps)
    out.append(f'<line x1="{x0}" y1="{yl:.1f}" x2="{x1}" y2="{yl:.1f}" stroke="#000" stroke-width="1.5" stroke-dasharray="7 4"/>')
    # The clients.
    for cid, _, colour in CLIENTS:
        if cid not in series:
            continue
        pts = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in series[cid])
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.8" stroke-linejoin="round"/>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" stroke="#555"/>')
    # 429s: one row of ticks per client under the axis.
    row_top = y1 + 4
    out.append(
        f'<text x="{x0 - 6}" y="{row_top + 1.5 * TICK_ROW + 4:.1f}" font-size="11" text-anchor="end" {FONT}>429s</text>'
    )
    for cid, _, colour in CLIENTS:
        out.append(f'<line x1="{x0}" y1="{row_top + TICK_ROW - 1}" x2="{x1}" y2="{row_top + TICK_ROW - 1}" stroke="#eee"/>')
        if cid in runs:
            bin_s = runs[cid]["series"]["bin_s"]
            for i, n in enumerate(runs[cid]["series"]["status_429"]):
                if n:
                    x = sx((i + 0.5) * bin_s)
                    out.append(
                        f'<line x1="{x:.1f}" y1="{row_top + 1}" x2="{x:.1f}" y2="{row_top + TICK_ROW - 1}" '
                        f'stroke="{colour}" stroke-width="1.5"/>'
                    )
        row_top += TICK_ROW
    # x axis.
    t = 0.0
    while t <= x_max + 1e-9:
        out.append(f'<text x="{sx(t):.1f}" y="{row_top + 13}" font-size="12" text-anchor="middle" {FONT}>{fmt(t)}</text>')
        t += x_step
    return row_top + 18


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py PUSHBACK.json OUT.svg")
    doc = json.load(open(sys.argv[1]))
    servers = {}  # server -> (server_rps, {client_id: run}), in the bench's order
    for r in doc["runs"]:
        servers.setdefault(r["server"], (r["server_rps"], {}))[1][r["client_id"]] = r
    x_max = max(len(r["series"]["ok"]) * r["series"]["bin_s"] for r in doc["runs"])
    x_max = nice_step(x_max, 10) * math.ceil(x_max / nice_step(x_max, 10))

    body = []
    # Legend: two columns.
    entries = [(label, colour, "") for _, label, colour in CLIENTS]
    entries += [
        ("the server's limit (nginx limit_req)", "#000", 'stroke-dasharray="7 4"'),
        ("no request starts after this", "#999", 'stroke-dasharray="2 3"'),
    ]
    y = 44
    for i, (label, colour, dash) in enumerate(entries):
        x = LEFT + (i % 2) * 360
        yy = y + (i // 2) * 18
        width = "1.8" if not dash else "1.5"
        body.append(f'<line x1="{x}" y1="{yy - 4}" x2="{x + 26}" y2="{yy - 4}" stroke="{colour}" stroke-width="{width}" {dash}/>')
        body.append(f'<text x="{x + 32}" y="{yy}" font-size="12" {FONT}>{escape(label)}</text>')
    top = y + 18 * ((len(entries) + 1) // 2)
    for server, (server_rps, runs) in servers.items():
        title = f"nginx limit_req {server}"
        top = panel(body, top, title, server_rps, runs, x_max, doc["duration_s"]) + 8
    top += 6
    body.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{top}" font-size="12" text-anchor="middle" {FONT}>seconds from the start</text>')
    height = top + 10

    title = (
        f"Push-back against nginx: 200s per second over a sliding {fmt(WINDOW_S)} s window, "
        f"{doc['workers']} workers"
    )
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">',
        f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>',
        f'<text x="{LEFT}" y="20" font-size="15" font-weight="bold" {FONT}>{escape(title)}</text>',
        *body,
        "</svg>",
    ]
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
