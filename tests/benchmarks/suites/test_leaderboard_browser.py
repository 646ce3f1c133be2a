"""The leaderboard page in a real headless Chromium at 1,400 px: nothing overflows the page
sideways, numbers stay on one line, and clicking headers and typing filters work. Skipped when
no Chromium is installed (``apt-get install chromium``)."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from test_leaderboard import fake_result, write_result

from benchmarks.suites.leaderboard import write_leaderboard

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome",
                                                 "google-chrome-stable") if shutil.which(name)),
               None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed")

#: Run -> seed -> linear-probe accuracy; every other metric is there too, to make the table wider
#: than the window.
PROBE = {"alpha": [0.81, 0.84], "beta": [0.95, 0.92], "gamma-with-a-rather-long-run-name":
         [0.62, 0.66], "delta": [0.88, 0.90]}
OTHER = {"knn50_top1": 0.7, "knn200_top1": 0.6, "svm_top1": 0.8, "kmeans_ari": 0.512,
         "kmeans_nmi": 0.634, "silhouette": 0.123, "online_val_acc": 0.75}

#: Runs in the page once it has loaded: measures the layout, clicks, types, and writes what it
#: saw into <pre id="check"> for --dump-dom to print.
CHECK = """<script>
window.addEventListener('load', () => {
  const out = {innerWidth: window.innerWidth, pageWidth: document.documentElement.scrollWidth};
  const box = document.querySelector('.table-box');
  out.boxScrolls = box.scrollWidth > box.clientWidth;
  out.boxRight = box.getBoundingClientRect().right;
  out.headerRights = Object.fromEntries(Array.from(document.querySelectorAll(
    'table.sortable th.sortable')).map(h => [h.textContent, h.getBoundingClientRect().right]));
  out.wrapped = [];
  document.querySelectorAll('td.num, .pm').forEach(el => {
    const range = document.createRange(); range.selectNodeContents(el);
    const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
    if (lines.size > 1) out.wrapped.push(el.textContent);
  });
  const pictures = Array.from(document.querySelectorAll('img, figure.chart svg'));
  out.images = pictures.length;
  out.wideImages = pictures
    .filter(i => i.getBoundingClientRect().right > window.innerWidth).length;
  const table = document.querySelector('table.sortable');
  const names = () => Array.from(table.tBodies[0].rows).filter(r => !r.hidden)
    .map(r => r.cells[0].textContent);
  const header = Array.from(table.querySelectorAll('th.sortable'))
    .find(h => h.textContent.startsWith('Linear probe'));
  const filterOf = col => table.querySelector(`tr.filters input[data-col="${col}"]`);
  const type = (input, text) => { input.value = text; input.dispatchEvent(new Event('input')); };
  const chart = document.querySelector('svg.cb-chart');
  // the runs the first chart shows, top to bottom, each with its dot's x and its whisker's ends
  const chartRuns = () => Array.from(chart.querySelectorAll('g.cb-run'))
    .filter(g => g.style.display !== 'none')
    .sort((a, b) => a.querySelector('.cb-dot').getAttribute('cy')
                    - b.querySelector('.cb-dot').getAttribute('cy'))
    .map(g => g.dataset.run);
  const chartState = () => ({runs: chartRuns(), left: +chart.dataset.left,
    right: +chart.dataset.right, height: chart.getBoundingClientRect().height,
    ticks: Array.from(chart.querySelectorAll('.cb-tick')).map(t => t.textContent),
    dots: Object.fromEntries(Array.from(chart.querySelectorAll('g.cb-run'))
      .filter(g => g.style.display !== 'none').map(g => {
        const dot = g.querySelector('.cb-dot').getBoundingClientRect();
        return [g.dataset.run, dot.left + dot.width / 2]; })),
    labelsInside: Array.from(chart.querySelectorAll('g.cb-run'))
      .filter(g => g.style.display !== 'none').every(g =>
        g.querySelector('.cb-label').getBoundingClientRect().left
        >= chart.getBoundingClientRect().left),
    plot: (() => { const b = chart.querySelector('.cb-baseline').getBoundingClientRect();
                   return [b.left, b.right]; })()});
  out.chartLoaded = chartState();
  out.loaded = names();
  header.click(); out.first = names(); out.firstSort = header.getAttribute('aria-sort');
  header.click(); out.second = names(); out.secondSort = header.getAttribute('aria-sort');
  table.querySelector('th.sortable[data-col="0"]').click(); out.byName = names();
  out.chartByName = chartState();
  type(filterOf(0), 'ALP'); out.filtered = names(); out.chartFiltered = chartState();
  type(filterOf(0), 'no such run'); out.chartHiddenWhenEmpty = chart.closest('figure').hidden;
  type(filterOf(0), ''); out.chartCleared = chartState();
  type(filterOf(header.dataset.col), '>85'); out.above = names();
  const pre = document.createElement('pre'); pre.id = 'check';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def browse(page: Path, width: int = 1400) -> dict:
    checked = page.with_name("checked.html")
    checked.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    dom = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},900", "--virtual-time-budget=10000", "--dump-dom",
         checked.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    match = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert match, f"the check did not run; the browser said: {dom[-500:]}"
    return json.loads(match.group(1).replace("&gt;", ">").replace("&lt;", "<")
                      .replace("&amp;", "&"))


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("board")
    for run, accuracies in PROBE.items():
        for seed, accuracy in enumerate(accuracies):
            result = fake_result(run, seed, {"linear_probe_top1": accuracy, **OTHER})
            result["config"]["run"]["paper"] = {"source": "Table 4, a paper's long table name",
                                                "linear_probe_top1": [88.11, 0.09]}
            write_result(root, result)
    write_leaderboard(root)
    return root / "leaderboard.html"


@pytest.fixture(scope="module")
def seen(page) -> dict:
    return browse(page)


@pytest.fixture(scope="module")
def narrow(page) -> dict:
    """The same page in a window 800 px wide."""
    return browse(page, width=800)


#: The metric columns of the page (every protocol of ``OTHER`` and the linear probe).
METRIC_HEADERS = ("Linear probe", "SVM", "kNN@50", "kNN@200", "k-means ARI", "k-means NMI",
                  "Silhouette", "Online probe")


def visible(headers: dict[str, float], width: int) -> list[str]:
    return [text for text, right in headers.items()
            if text.startswith(METRIC_HEADERS) and right <= width]


def test_the_scores_come_first_and_stay_in_view(seen, narrow) -> None:
    """At 1,400 px every metric column is in view on load; at 800 px the headline and the
    next ones are, and the page still never scrolls sideways."""
    assert len(visible(seen["headerRights"], 1400)) == len(METRIC_HEADERS)
    assert narrow["innerWidth"] == 800 and narrow["pageWidth"] <= 800
    shown = visible(narrow["headerRights"], 800)
    assert shown[0].startswith("Linear probe") and len(shown) >= 3, narrow["headerRights"]
    assert narrow["wideImages"] == 0


def by_probe() -> list[str]:
    return sorted(PROBE, key=lambda run: -statistics.fmean(PROBE[run]))


def test_nothing_overflows_the_page_at_1400_px(seen) -> None:
    assert seen["innerWidth"] == 1400
    assert seen["pageWidth"] <= seen["innerWidth"]  # the page never scrolls sideways
    assert seen["boxScrolls"]  # the wide table scrolls inside its box instead
    assert seen["boxRight"] <= seen["innerWidth"]
    assert seen["images"] >= 8 and seen["wideImages"] == 0


def test_mean_and_std_stay_on_one_line(seen) -> None:
    assert seen["wrapped"] == []


def test_a_click_on_a_header_sorts_by_it(seen) -> None:
    assert seen["loaded"] == by_probe()  # the headline's order, as written
    assert seen["first"] == by_probe() and seen["firstSort"] == "descending"
    assert seen["second"] == by_probe()[::-1] and seen["secondSort"] == "ascending"
    assert seen["byName"] == sorted(PROBE)


def naive_axis(runs: list[str]) -> tuple[float, float]:
    """The axis of the linear probe's chart for ``runs``, by hand: their means ± sample std
    over seeds and the paper's 88.11 ± 0.09, padded by a tenth of the spread (at least 0.5)."""
    values = [88.11 - 0.09, 88.11 + 0.09]
    for run in runs:
        mean, std = 100 * statistics.fmean(PROBE[run]), 100 * statistics.stdev(PROBE[run])
        values += [mean - std, mean + std]
    pad = max(0.1 * (max(values) - min(values)), 0.5)
    return max(min(values) - pad, 0.0), min(max(values) + pad, 100.0)


def test_the_charts_follow_the_filters_and_the_order_and_rescale(seen) -> None:
    """A chart shows the rows the table shows, in its order, on an axis spanning their values:
    filtered down to one run, the axis rescales to it and the chart gets shorter."""
    loaded, by_name = seen["chartLoaded"], seen["chartByName"]
    filtered, cleared = seen["chartFiltered"], seen["chartCleared"]
    assert loaded["runs"] == by_probe() and by_name["runs"] == sorted(PROBE)
    assert (loaded["left"], loaded["right"]) == pytest.approx(naive_axis(list(PROBE)))
    assert filtered["runs"] == ["alpha"]
    assert (filtered["left"], filtered["right"]) == pytest.approx(naive_axis(["alpha"]))
    assert filtered["right"] - filtered["left"] < loaded["right"] - loaded["left"]
    assert filtered["ticks"] != loaded["ticks"] and filtered["height"] < loaded["height"]
    assert seen["chartHiddenWhenEmpty"] is True
    assert loaded["labelsInside"] and filtered["labelsInside"]  # a long name is cut, not clipped
    assert cleared["runs"] == sorted(PROBE) and cleared["left"] == loaded["left"]
    for state in (loaded, filtered):  # each dot where its mean falls on the drawn axis
        (x0, x1), (left, right) = state["plot"], (state["left"], state["right"])
        for run, x in state["dots"].items():
            mean = 100 * statistics.fmean(PROBE[run])
            assert x == pytest.approx(x0 + (mean - left) / (right - left) * (x1 - x0), abs=1.0)


def test_filters_keep_the_matching_rows(seen) -> None:
    assert seen["filtered"] == ["alpha"]  # case-insensitive text
    assert seen["above"] == [run for run in sorted(PROBE)  # still sorted by name
                             if 100 * statistics.fmean(PROBE[run]) > 85]


def test_report_takes_the_pages_screenshot_at_the_width_asked(page, tmp_path, capsys) -> None:
    """The README's screenshot comes from ``clusterbench report --screenshot``."""
    import io

    from PIL import Image

    from benchmarks.cli import main

    shot = tmp_path / "docs" / "leaderboard.png"
    assert main(["report", str(page.parent), "--out", str(tmp_path / "docs"), "--screenshot",
                 str(shot), "--width", "800"]) == 0
    assert Image.open(io.BytesIO(shot.read_bytes())).size == (800, 900)
    assert f"Wrote {shot} (the page at 800 px, in headless Chromium)" in capsys.readouterr().out
