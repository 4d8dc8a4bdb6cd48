"""The HTML report and the Chrome trace export."""

from __future__ import annotations

import json
import shutil
import subprocess

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import RUNS  # noqa: E402

import gmpanalysis as gmp  # noqa: E402
from gmpanalysis.cli import main  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def report(example_report):
    return example_report  # gmpanalysis report of the example runs (tests/conftest.py)


def test_report_is_self_contained(report):
    html = report.read_text()
    n_img = html.count('<img src="data:image/png;base64,')
    # per run: periods + heatmap + STW; plus the comparison and the MMU panels
    assert n_img == 3 * len(RUNS) + 2
    assert 'src="http' not in html and "<script" not in html
    # the shipped fixtures were read whole: the Data notes box says so, above the findings
    notes = html[html.index('<section id="data-notes"') : html.index("<h2>Findings</h2>")]
    assert "Data notes" in notes and "None: no run had" in notes


def test_report_findings_are_computed_from_the_data(report):
    html = report.read_text()
    cmp = gmp.compare_runs([gmp.load_run(p) for p in RUNS]).set_index("name")
    a = cmp.loc["alloc-0.5cpu-gmp8"]
    assert f"frozen in {a.frozen_pct_wall:.0f} % of periods, {a.frozen_ms_per_s:.0f} ms per second" in html
    assert f"its own quota ran out {a.exhausted_p50_ms:.0f} ms into the period" in html
    assert f"The longest stop-the-world pause, {a.stw_max_us / 1e3:.0f} ms, spanned a frozen boundary" in html
    # runs compared on latency are of one service under one load and limit: the CPU-bound
    # runs at 0.5 CPU together, not the allocating one, nor those resized to 2 CPUs
    assert "One service, load and limit (cpu 30 ms; open poisson 18.0; 500m at the container)" in html
    assert "One service, load and limit (alloc" not in html


def test_report_advises_each_run_from_its_replay(report):
    """Each run's section says what the replay recommends (for p99, no burst): the same
    sentence gmp.advise gives."""
    import html as html_mod

    html = report.read_text()
    assert html.count("<h3>What should it run with?</h3>") == len(RUNS)
    for path in RUNS[:2]:
        adv = gmp.advise(gmp.load_run(path), objective="p99", bursts=(0.0,))
        assert html_mod.escape(adv.attrs["recommendation"]) in html, path


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (scripts/test.sh installs it when run as root)")
def test_report_renders_in_chromium(report, tmp_path):
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1300,6000",  # the findings, the table and the first runs' figures
            f"--screenshot={shot}",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), r.stderr[-2000:]
    img = matplotlib.image.imread(shot)[..., :3]
    # the figures' colours are there: orange bars, red freeze, blue busy CPUs
    orange = (img[..., 0] > 0.9) & (img[..., 1] > 0.4) & (img[..., 1] < 0.6) & (img[..., 2] < 0.2)
    red = (img[..., 0] > 0.75) & (img[..., 1] < 0.35) & (img[..., 2] < 0.35)
    blue = (img[..., 2] > 0.5) & (img[..., 0] < 0.3)
    for name, mask in (("orange", orange), ("red", red), ("blue", blue)):
        assert mask.mean() > 0.002, f"no {name} pixels: images did not render"


def test_chrome_trace(tmp_path):
    run = gmp.load_run(next(p for p in RUNS if p.name.startswith("alloc")))
    out = gmp.to_chrome_trace(run, tmp_path / "t.json")
    doc = json.loads(out.read_text())
    ev = doc["traceEvents"]
    for e in ev:
        assert {"ph", "name", "pid", "tid"} <= e.keys(), e
        if e["ph"] in ("X", "C"):
            assert isinstance(e["ts"], float | int)
        if e["ph"] == "X":
            assert e["dur"] >= 0
        if e["ph"] == "M":
            assert "name" in e["args"]
    per = gmp.df_periods(run)
    by = lambda ph, cat=None: [e for e in ev if e["ph"] == ph and (cat is None or e.get("cat") == cat)]  # noqa: E731
    assert len(by("C")) == 2 * len(per)
    assert len(by("X", "cfs")) == int((per.throttled & per.exhausted_at_us.notna()).sum())
    assert len(by("X", "stw")) == len(run.trace.stw)
    assert len(by("X", "gc")) == len(run.trace.gc)
    frozen = np.array([e["dur"] for e in by("X", "cfs")])
    assert np.median(frozen) == pytest.approx(70_000, rel=0.15)  # µs: ~70 ms per throttled period


def test_report_shows_uncertain_periods_as_uncertain(tmp_path):
    """A bundle whose samples have a 350 ms hole: the report names the ambiguous group with
    what the counters prove, says how much the sampler missed, and hatches the periods."""
    # in this run and place, the hole holds 4 period ends of which 2 were throttled
    src = next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp1")
    d = tmp_path / "holed"
    shutil.copytree(src, d)
    lines = (d / "cpu_stat.csv").read_text().splitlines(keepends=True)
    t = np.array([int(x.split(",")[0]) for x in lines[1:]])
    cut = (t > t[0] + 2_000_000_000) & (t < t[0] + 2_350_000_000)
    (d / "cpu_stat.csv").write_text(lines[0] + "".join(x for x, c in zip(lines[1:], cut, strict=True) if not c))
    run = gmp.load_run(d)
    per = gmp.df_periods(run)
    g = gmp.df_period_groups(per).iloc[0]
    out = gmp.to_report([run], tmp_path / "r.html")
    html = out.read_text()
    assert f"{g.boundaries} period ends fell in one" in html
    assert f"the counters prove {int(g.nr_throttled)} of them throttled" in html
    assert "The sampler missed" in html and "no host_stat.csv" in html
    assert "periods unknown (holes in the samples)" in html
    assert 0 < g.nr_throttled < g.boundaries and per["throttled"].isna().sum() == g.boundaries
    assert f"{g.boundaries} period(s) are shown as unknown (hatched)" in html
    ax = gmp.plot_periods(per)
    assert any(h.get_label() == "unknown: hole in the samples" for h in ax.get_legend().legend_handles)


def test_hostile_run_names(tmp_path, capsys):
    """Run names are data: a mathtext-looking name is drawn as literal text (matplotlib
    would try to parse it), a lone surrogate (an undecodable byte in a directory name) or an
    escape sequence neither breaks the HTML nor the JSON export; in a bundle's meta.json a lone
    surrogate is not text, and the summary refuses it in one line."""
    runs = [gmp.load_run(p) for p in RUNS[:2]]
    runs[0].meta["name"] = r"$\foo{x}$ 100$"
    runs[1].meta["name"] = "bad \udcff name \x1b[31m"
    out = gmp.to_report(runs, tmp_path / "r.html")
    text = out.read_bytes().decode("utf-8")  # valid UTF-8
    assert r"<h2>$\foo{x}$ 100$</h2>" in text and "bad \ufffd name" in text
    export = gmp.to_chrome_trace(runs[1], tmp_path / "t.json")
    assert json.loads(export.read_text())["otherData"]["run"] == "bad \udcff name \x1b[31m"

    bundle = tmp_path / "b"
    shutil.copytree(RUNS[0], bundle)
    meta = json.loads((bundle / "meta.json").read_text())
    meta["name"] = "bad \udcff"
    (bundle / "meta.json").write_text(json.dumps(meta))  # ASCII JSON: the surrogate as \udcff
    # not text: the bundle's schema refuses it, with one line naming the file and the place
    assert main(["summary", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert "meta.json" in err and "lone surrogate" in err and "Traceback" not in err


def test_plain_text_keeps_names_literal():
    import matplotlib.pyplot as plt

    from gmpanalysis.plot import plain_text

    assert plain_text(r"$\foo{x}$") == r"\$\foo{x}\$"
    assert plain_text("a\udcffb\x1b") == "a\ufffdb\\x1b"
    fig, ax = plt.subplots()
    ax.set_title(plain_text(r"$\foo{x}$"))
    fig.canvas.draw()  # would raise ValueError (ParseFatalException) on the raw name
    plt.close(fig)


def test_a_run_no_quota_limited_has_its_row_and_section(tmp_path):
    """One container without a CPU limit among limited runs: summary and report go on. Its
    row says it never throttled or froze (no periods to count: NaN), its findings say so in
    words, its section says why there is no period to draw and gives the advice; the
    limited run's part is unchanged."""
    from pathlib import Path

    from gmpanalysis.report import findings

    free = gmp.load_run(Path("fixtures/whatif/unlimited-cpu-gmp2"))
    hot = gmp.load_run(Path("fixtures/runs/cpu-0.5cpu-gmp8"))
    cmp = gmp.compare_runs([hot, free]).set_index("name")
    row = cmp.loc["unlimited-cpu-gmp2"]
    assert row["throttled_periods"] == 0 and row["frozen_pct_wall"] == 0 and row["stall_ms_per_s"] == 0
    assert np.isnan(row["periods"]) and row["latency_p99_ms"] > 0
    own = gmp.period_summary(gmp.df_periods(hot))
    assert cmp.loc["cpu-0.5cpu-gmp8", "throttled_periods"] == own["throttled_periods"]
    said = findings(gmp.compare_runs([free]))[0]
    assert said == "unlimited-cpu-gmp2: GOMAXPROCS 2 with no CPU limit — never throttled.", said
    out = gmp.to_report([hot, free], tmp_path / "r.html")
    html = out.read_text()
    assert "No quota limited this run at any level" in html and "What should it run with?" in html
    import re

    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    assert not re.search(r"\bnan\b", text, re.I)


def test_copies_of_one_bundle_are_told_apart(tmp_path):
    """Two bundles whose meta.json give one name (a copy, a rerun under the same name):
    tables and report name each with its directory."""
    import re
    from pathlib import Path

    for d in ("a", "b"):
        shutil.copytree(Path("fixtures/runs/cpu-0.5cpu-gmp1"), tmp_path / d)
    (tmp_path / "b" / "requests.csv").unlink()
    runs = [gmp.load_run(tmp_path / d) for d in ("a", "b")]
    names = list(gmp.compare_runs(runs)["name"])
    assert names == ["cpu-0.5cpu-gmp1 (a)", "cpu-0.5cpu-gmp1 (b)"], names
    html = gmp.to_report(runs, tmp_path / "r.html").read_text()
    assert re.findall(r"<h2>(cpu-0\.5cpu-gmp1[^<]*)</h2>", html) == names


def test_an_output_inside_a_bundle_is_refused(tmp_path, capsys):
    from pathlib import Path

    shutil.copytree(Path("fixtures/runs/cpu-0.5cpu-gmp1"), tmp_path / "b")
    before = (tmp_path / "b" / "cpu_stat.csv").read_bytes()
    assert main(["report", "-o", str(tmp_path / "b" / "cpu_stat.csv"), str(tmp_path / "b")]) == 2
    assert "the data read" in capsys.readouterr().err
    assert (tmp_path / "b" / "cpu_stat.csv").read_bytes() == before


def test_cpus_frozen_above_gomaxprocs_are_explained():
    """The CPUs frozen are run queues' throttled time over the stall: on the 6.1 VM run at
    GOMAXPROCS 2 its median is 3.1, and the finding says why it can exceed the Ps; at 2.0
    (the 2-CPU host run) it says nothing more."""
    from conftest import FIXTURES

    from gmpanalysis.report import findings

    runs = [
        gmp.load_run(FIXTURES / "runs-v2" / "v2-6.1-cpu-0.5cpu-gmp2"),
        gmp.load_run(RUNS[0].parent / "cpu-0.5cpu-gmp2"),
    ]
    cmp = gmp.compare_runs(runs)
    assert cmp["cpus_throttled_p50"].iloc[0] > 2.5 and cmp["cpus_throttled_p50"].iloc[1] <= 2.5
    vm, host = findings(cmp)[:2]
    assert "more than its 2 Ps" in vm and "threads without a P" in vm
    assert "more than its" not in host


def test_a_short_period_run_is_reported(tmp_path):
    """A real run at a 2 ms period: the report (its offsets figure on 0.2 ms buckets) is
    written, and says the period."""
    run = gmp.load_run("fixtures/short-period/period-2ms-0.5cpu-gmp2")
    html = gmp.to_report([run], tmp_path / "r.html").read_text()
    assert "period-2ms-0.5cpu-gmp2" in html and "1 ms per 2 ms" in html
