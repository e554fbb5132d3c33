#!/usr/bin/python3
"""tools/plot_loss.py — plot a training record (train_steps.csv and
train_log.csv from tools/train.py) as a PNG with gnuplot: training and
held-out bits/byte against training step.

    usage: tools/plot_loss.py MODEL_DIR      writes MODEL_DIR/loss.png
"""
import json
import os
import subprocess
import sys


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    csv = os.path.join(d, "train_log.csv")
    steps = os.path.join(d, "train_steps.csv")
    png = os.path.join(d, "loss.png")
    final = json.load(open(os.path.join(d, "final.json")))
    title = "lind default model: %d steps x %d x %d bytes, %.0f min on %d threads" % (
        final["steps"], final["batch"], final["ctx"], final["train_seconds"] / 60, final["threads"])
    script = "\n".join([
        "set terminal pngcairo size 900,540 font 'sans,10'",
        "set output '%s'" % png,
        "set datafile separator ','",
        "set title '%s'" % title,
        "set xlabel 'training step'",
        "set ylabel 'bits per byte'",
        "set grid",
        "set yrange [1:4]",
        "set key top right",
        "plot '%s' using 1:3 skip 1 with lines lw 1 lc rgb '#c0c0e0' title 'training batch', \\" % steps,
        "     '%s' using 1:4 skip 1 with lines lw 2 lc rgb '#4040c0' title 'training (mean of the last 100 steps)', \\" % csv,
        "     '%s' using 1:5 skip 1 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#008060' title 'held-out (16 windows of 256 bytes)'" % csv,
        ""])
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print("plot: %s" % png)


if __name__ == "__main__":
    main()
