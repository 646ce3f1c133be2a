"""Text from a file reaches no console with a control character, matplotlib's warnings included:
a run named ``"\\x1b[31m..."`` drawn in a figure made matplotlib print "Glyph 27 (<ESC>) missing
from font(s)", the ESC raw on the terminal. Each figure with names from files draws them through
:func:`benchmarks.infra.plots.plain_text`, and a control character's glyph warning is kept off
the console for any text that is not; a real missing glyph is still said."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from repository import ROOT

from benchmarks.infra.plots import plain_text

#: A run name as a copied results folder may hold it: a colour, a bell, a carriage return.
NAME = "simclr\x1b[31m\x07\r/red"
CONTROLS = [chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]]


def console_of(script: str) -> str:
    """stdout and stderr of ``script`` run as a command is (Python's warnings as they print)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_every_figure_drawing_names_from_files_prints_no_control_character():
    console = console_of(f"""
        import numpy as np
        from benchmarks.infra.plots import tsne_panels_png
        from benchmarks.suites.curves import learning_curves
        from benchmarks.suites.render_html import line_plot_png
        from tune.outputs import trial_curves_png

        name = {NAME!r}
        curves = {{name: {{"train_loss": {{0: 2.0, 1: 1.5}},
                           "online_val_acc": {{0: 0.3, 1: 0.4}}}}}}
        assert learning_curves(curves)
        rows = [{{"run": name, "dataset": name, "run_config": {{"model": {{"lr": lr}}}},
                  "metrics": {{"knn_top1": {{"mean": 0.5, "std": 0.1}}}}}} for lr in (0.1, 0.2)]
        assert line_plot_png(rows, {{"x": "model.lr", "y": "knn_top1", "title": name,
                                     "series": "model.lr"}})
        points = np.random.default_rng(0).normal(size=(40, 4))
        assert tsne_panels_png([points], np.arange(40) % 2, [name], class_names=[name, name],
                               iterations=250)
        trials = [{{"trial_id": name, "model.lr": name, "knn_top1": 0.5, "status": name}}]
        assert trial_curves_png({{name: ([1, 2], [0.1, 0.2])}}, trials, "knn_top1", 2)
        print("drawn")
        """)
    assert "drawn" in console
    assert [c for c in CONTROLS if c in console] == []


def test_text_drawn_around_plain_text_prints_no_control_character_either():
    console = console_of(f"""
        from benchmarks.infra.plots import png_bytes, pyplot

        plt = pyplot()
        fig, ax = plt.subplots()
        ax.set_title({NAME!r})
        ax.set_xlabel("\\x1b]0;retitled\\x07")
        png_bytes(fig)
        print("drawn")
        """)
    assert "drawn" in console and [c for c in CONTROLS if c in console] == []


def test_a_glyph_no_font_has_is_still_said():
    """Only a control character's warning is kept off: a private-use character, which no font
    draws, is still named (and its box drawn)."""
    console = console_of("""
        from benchmarks.infra.plots import png_bytes, pyplot

        plt = pyplot()
        fig, ax = plt.subplots()
        ax.set_title("run \\ue000")
        png_bytes(fig)
        """)
    assert "Glyph 57344" in console and "missing from font" in console


@pytest.mark.parametrize("text, drawn", [
    (NAME, "simclr?[31m??/red"),
    ("a$b$", "a\\$b\\$"),
    ("tab\tand\nnewline", "tab\tand\nnewline"),
    (0.5, "0.5"),
])
def test_plain_text_is_drawn_literally_and_without_control_characters(text, drawn):
    assert plain_text(text) == drawn
    assert [c for c in CONTROLS if c in plain_text(text)] == []
