#!/usr/bin/env python3
"""Charts of a benchmark run, drawn with gnuplot (Debian's gnuplot-nox); this script only reshapes the JSON.

    Benchmarks/plot.py RESULTS.json HISTOGRAMS.json OUTDIR

RESULTS.json is `portloop-bench --json` output, HISTOGRAMS.json what `--histograms PATH` wrote (keys: Benchmarks/
README.md). Writes into OUTDIR, as SVG and PNG:
  - pingpong-latency: round-trip percentile curves, between threads, ours and every peer on one chart
  - ipc-latency:      round-trip percentile curves across processes (ipc-pingpong and peers-pingpong at 8 B)
  - timers-lateness:  timer lateness percentile curves, 100,000 timers over 50 ms, ours, CF, NIO, libevent
  - throughput:       the throughput scenarios' messages per second as bars
A chart whose scenario is not in the files is skipped. The percentile axis is HdrHistogram's usual one:
1/(1-p), logarithmic, so that the tail (99 %, 99.9 %, ...) gets as much room as the median.
Standard library only, so that nothing but gnuplot has to be installed.
"""
import json
import os
import subprocess
import sys
import tempfile


def load(path):
    with open(path) as handle:
        return json.load(handle)


def percentile_curves(histograms, scenario, accept):
    """[(title, [(1/(1-p), value in µs)])] for the scenario's series whose name `accept` takes."""
    curves = []
    for entry in histograms:
        if entry["scenario"] != scenario or entry["count"] == 0:
            continue
        title = accept(entry["series"])
        if title is None:
            continue
        points = []
        for percentile, value in entry["percentiles"]:
            if percentile >= 100.0:
                continue  # 1/(1-p) is infinite at the maximum
            points.append((1.0 / (1.0 - percentile / 100.0), value / 1e3))
        if points:
            curves.append((title, points))
    return curves


def write_data(directory, name, rows):
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        for row in rows:
            handle.write(" ".join(str(cell) for cell in row) + "\n")
    return path


def quoted(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def terminals(outdir, name):
    """(terminal, output path) pairs: each chart is drawn once per format."""
    return [
        ("svg size 960,560 dynamic font 'sans,11'", os.path.join(outdir, name + ".svg")),
        ("pngcairo size 960,560 font 'sans,10'", os.path.join(outdir, name + ".png")),
    ]


def percentile_chart(work, outdir, name, title, ylabel, curves):
    if not curves:
        print(f"plot.py: no data for {name}, skipped", file=sys.stderr)
        return []
    commands = []
    for terminal, output in terminals(outdir, name):
        commands += [
            f"set terminal {terminal}",
            f"set output {quoted(output)}",
            f"set title {quoted(title)}",
            "set logscale x 10",
            "set logscale y 10",
            "set xrange [1:*]",
            "set xtics ('0 %%' 1, '90 %%' 10, '99 %%' 100, '99.9 %%' 1000, '99.99 %%' 10000, "
            "'99.999 %%' 100000, '99.9999 %%' 1000000)",
            "set xlabel 'percentile'",
            f"set ylabel {quoted(ylabel)}",
            "set grid",
            "set key bottom right box opaque",
        ]
        plots = []
        for index, (series, points) in enumerate(curves):
            data = write_data(work, f"{name}-{index}.dat", points)
            plots.append(f"{quoted(data)} using 1:2 with steps lw 2 title {quoted(series)}")
        commands.append("plot " + ", ".join(plots))
        commands.append("unset output")
        commands.append("reset")
    return commands


def throughput_chart(work, outdir, results):
    rows = [row for row in results
            if row["unit"] in ("messages/s", "msg/s") and row["value"] is not None
            and row["scenario"] in ("throughput", "ipc-throughput")]
    if not rows:
        # Whatever the throughput scenarios call their unit: any row whose unit is a rate.
        rows = [row for row in results if row["value"] is not None and row["unit"].endswith("/s")
                and "throughput" in row["scenario"]]
    if not rows:
        print("plot.py: no throughput rows, skipped", file=sys.stderr)
        return []
    data = write_data(work, "throughput.dat",
                      [(index, row["value"] / 1e6, quoted(f"{row['scenario']}: {row['name']}"))
                       for index, row in enumerate(rows)])
    unit = rows[0]["unit"]
    commands = []
    for terminal, output in terminals(outdir, "throughput"):
        height = max(400, 28 * len(rows) + 120)
        terminal = terminal.replace("size 960,560", f"size 1100,{height}")
        commands += [
            f"set terminal {terminal}",
            f"set output {quoted(output)}",
            "set title 'Throughput (median of the runs)'",
            "set style fill solid 0.7",
            "set boxwidth 0.7",
            f"set xlabel {quoted('millions of ' + unit)}",
            "set grid x",
            "set yrange [-1:" + str(len(rows)) + "]",
            "set ytics scale 0 font ',8'",
            "unset key",
            "set lmargin 70",
            f"plot {quoted(data)} using (0.5*$2):1:(0.5*$2):(0.35):ytic(3) with boxxy",
            "unset output",
            "reset",
        ]
    return commands


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    results, histograms, outdir = load(argv[1]), load(argv[2]), argv[3]
    os.makedirs(outdir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="portloop-plots.") as work:
        commands = []
        commands += percentile_chart(
            work, outdir, "pingpong-latency", "Round trip between two threads (pingpong)", "round trip (µs)",
            percentile_curves(histograms, "pingpong", lambda series: series))
        ipc = percentile_curves(histograms, "ipc-pingpong", lambda series: f"PortLoop {series} (ipc-pingpong)")

        def peer_series(series):
            if not series.endswith(", 8 B"):
                return None
            name = series[:-len(", 8 B")]
            ours = name.startswith("loop:") or name.startswith("ports:")
            return f"PortLoop {name} (peers-pingpong)" if ours else f"{name} (peers-pingpong)"
        ipc += percentile_curves(histograms, "peers-pingpong", peer_series)
        commands += percentile_chart(
            work, outdir, "ipc-latency", "Round trip to another process, 8-byte payload", "round trip (µs)", ipc)
        commands += percentile_chart(
            work, outdir, "timers-lateness", "Timer lateness: 100,000 one-shot timers over 50 ms", "lateness (µs)",
            percentile_curves(histograms, "timers",
                              lambda series: series[:-len(", 100k timers")] if series.endswith(", 100k timers")
                              else None))
        commands += throughput_chart(work, outdir, results)
        if not commands:
            print("plot.py: nothing to plot", file=sys.stderr)
            return 1
        script = write_data(work, "charts.gp", [[line] for line in commands])
        completed = subprocess.run(["gnuplot", script])
        if completed.returncode != 0:
            print(f"plot.py: gnuplot failed ({completed.returncode})", file=sys.stderr)
            return 1
    print(f"plot.py: charts written to {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
