"""The ``gmpanalysis`` command."""

from __future__ import annotations

import argparse
import io
import os
import re
import stat
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .cgroup import MAX_CPUS
from .cliargs import (
    burst_shares,
    cgroup_parent,
    check_not_inside,
    check_out_dir,
    check_out_file,
    check_writable_dir,
    duration,
    existing_dir,
    float_in,
    gomaxprocs_value,
    gomaxprocs_values,
    int_in,
    progress,
)
from .clilab import add_lab_args, cmd_lab_clean, cmd_lab_run, cmd_lab_sweep
from .errors import GmpError, GmpWarning, UsageError

T = TypeVar("T")


def _default_bundles() -> list[Path]:
    """The example runs (GMP_DATA, a source checkout's fixtures, or the installed package's copy)."""
    from .examples import example_runs

    return example_runs()


# --- argument types: a value out of range is argparse's usage error, naming the option ---


def cmd_summary(a: argparse.Namespace) -> int:
    import pandas as pd

    from .bundle import load_run
    from .frames import compare_runs

    paths = [Path(p) for p in a.bundles] or _default_bundles()
    if not paths:
        print("no bundles given and no example runs found; pass bundle directories", file=sys.stderr)
        return 2
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in paths:
            run = load_run(p)
            for n in run.notes:
                print(f"{p}: note: {n}", file=sys.stderr)
            runs.append(run)
    df = _tolerating_traces(runs, compare_runs)
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.1f}".format):
        print(df.set_index("name").T.to_string(na_rep="–"))  # a value the runs cannot tell, as the report shows it
    return 0


def _tolerating_traces(runs: list[Any], work: Callable[[list[Any]], T], say: bool = True) -> T:
    """``work(runs)``, again without a run's trace each time one cannot be read or is
    another run's (a TraceFormatError or ForeignTraceError, whose text begins with the
    trace's path): a damaged or foreign trace costs its own columns, not the command.
    ``say``: print the note (the caller prints the runs' notes otherwise)."""
    from .bundle import without_trace
    from .errors import ForeignTraceError, TraceFormatError

    while True:
        try:
            return work(runs)
        except (TraceFormatError, ForeignTraceError) as e:
            text = str(e)
            hit = [
                i
                for i, r in enumerate(runs)
                if r.trace_path is not None and re.match(re.escape(str(r.trace_path)) + r"[ :]", text)
            ]
            if not hit:
                raise
            i = max(hit, key=lambda i: len(str(runs[i].trace_path)))
            runs[i] = without_trace(runs[i], e)
            if say:
                print(f"{runs[i].path}: note: {runs[i].notes[-1]}", file=sys.stderr)


def cmd_advise(a: argparse.Namespace) -> int:
    import pandas as pd

    from .advise import advise
    from .bundle import load_run

    paths = [Path(p) for p in a.bundles]
    runs = []
    told: list[int] = []

    def tell() -> None:  # what the data lacks, before the answer built on it
        for i, (p, r) in enumerate(zip(paths, runs, strict=False)):
            told.extend([0] * (i + 1 - len(told)))
            for n in r.notes[told[i] :]:
                print(f"{p}: note: {n}", file=sys.stderr)
            told[i] = len(r.notes)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in paths:
            runs.append(load_run(p))
            tell()
        t = _tolerating_traces(
            runs,
            lambda rs: advise(
                rs,
                objective=a.objective,
                cpus=a.cpus,
                max_limit=a.max_limit,
                **({"bursts": a.bursts} if a.bursts else {}),
            ),
            say=False,
        )
    tell()  # and what reading the traces and replaying found (a truncated trace, a load of unknown kind)
    cols = ["rank", "limit_cpu", "gomaxprocs", "burst_us", "throttled_pct", "stall_ms_per_s", "p99_ms", "cost_cpu"]
    if (t["frozen_pct"] - t["throttled_pct"]).abs().max() > 0.5:
        # a level above (a pod's quota) freezes the work too: what the throttle and cost objectives rank by
        cols[cols.index("stall_ms_per_s") + 1 : cols.index("stall_ms_per_s") + 1] = ["frozen_pct", "frozen_ms_per_s"]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.2f}".format):
        print(t[cols].head(a.top).to_string(index=False))
        print()
        print(t.attrs["recommendation"])
        b = t.attrs["baselines"]
        if len(b):
            print()
            was = "the run as it was" if len(runs) == 1 else "each run as it was"
            print(f"the same limit with GOMAXPROCS by each rule, and {was}:")
            keep = ["setting", "limit_cpu", "throttled_pct", "p99_ms", "throttled_worse_points", "p99_worse_pct"]
            print(b[keep].to_string(index=False))
    err = ", ".join(f"{k} {v[0]:g} (p90 {v[1]:g}) {v[2]}" for k, v in t.attrs["model_error"].items())
    if err:
        print(f"\nthe model's held-out error on real runs in this regime ({t.attrs['regime']}; median, p90): {err}")
    else:
        # why (a regime, CPUs or a kind of load no validated run had) the recommendation says
        print(f"\nno error bars in this regime ({t.attrs['regime']}): the recommendation above says why")
    return 0


def add_advise_args(av: argparse.ArgumentParser) -> None:
    av.add_argument("bundles", nargs="+", help="run bundle directories (runs of one service)")
    av.add_argument("--objective", choices=["throttle", "p99", "cost"], default="p99", help="what to rank by")
    av.add_argument("--cpus", type=int_in(1, MAX_CPUS), help="CPUs the service may use (default: the run's)")
    av.add_argument(
        "--max-limit", type=float_in(0, MAX_CPUS, lo_open=True), default=None, help="largest limit to consider, CPUs"
    )
    av.add_argument(
        "--bursts",
        type=burst_shares,
        default=None,
        help="bursts to weigh, as shares of the quota (default: gmp.advise's, none and the quota; 0 alone for a "
        "platform that sets no cpu.max.burst, as a Kubernetes pod spec cannot)",
    )
    av.add_argument("--top", type=int_in(1), default=10, help="rows to print (default: 10)")
    av.set_defaults(func=cmd_advise)


def cmd_fleet(a: argparse.Namespace) -> int:
    import pandas as pd

    from .fleet import df_fleet_workloads, fleet
    from .fleet.compute import REPORT, default_out

    out = a.out or default_out(a.sources)
    check_writable_dir(out, "-o")  # before the workers start: each would fail alone
    summary = fleet(a.sources, out, scheduler=a.scheduler, workers=a.workers, progress=not a.no_progress)
    wl = df_fleet_workloads(summary)
    cols = ["namespace", "workload", "bundles", "frozen_cpu_s_per_h", "frozen_wall_pct", "throttled_pct_wall",
            "stw_spanning_per_h",
            "gomaxprocs", "limit_cpus"]  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.2f}".format):
        print(wl[cols].head(a.top).to_string(index=False))
    bad = int(summary["error"].notna().sum())
    print(f"\n{len(summary)} bundles ({bad} not analysed); tables under {out}, report {out.rstrip('/')}/{REPORT}")
    return 0


def cmd_store_put(a: argparse.Namespace) -> int:
    import shutil

    from .errors import GmpError
    from .fleet import put_bundle
    from .fleet.store import finished_bundles

    failed = 0
    for b in a.bundles:
        if (Path(b) / "meta.json").exists():
            todo = [Path(b)]
        else:
            # a directory of bundles (gmp-agent's spool): the finished ones; those still
            # being written are left for the next put
            todo, busy = finished_bundles(b)
            for d in busy:
                print(f"{d}: still being written: left for the next put", file=sys.stderr)
        for d in todo:
            try:
                print(put_bundle(d, a.store, cluster=a.cluster))
            except GmpError as e:  # one bad bundle does not hold the others back
                print(f"gmpanalysis: {e}", file=sys.stderr)
                failed += 1
                if a.move and d.parent != Path(b).parent:
                    # set aside in the spool, out of the next puts' way (and counted by the
                    # agent's spool cap until someone looks)
                    aside = d.parent / ".failed" / d.name
                    aside.parent.mkdir(exist_ok=True)
                    if aside.exists():  # a bundle of that name set aside before: keep both
                        aside = aside.with_name(f"{d.name}.{time.time_ns()}")
                    d.rename(aside)
                    print(f"gmpanalysis: {d} set aside as {aside}", file=sys.stderr)
                continue
            if a.move:
                shutil.rmtree(d)  # it is in the store (its meta.json last): the copy may go
    if failed:
        print(f"gmpanalysis: {failed} bundle(s) not stored (above); the others are stored", file=sys.stderr)
    return 1 if failed else 0


def cmd_store_ls(a: argparse.Namespace) -> int:
    from .fleet import list_bundles

    for k in list_bundles(a.store)["key"]:
        print(k)
    return 0


def cmd_trace(a: argparse.Namespace) -> int:
    import pandas as pd

    from .gotrace import read_trace
    from .gotrace.summary import RUNNING_NOTE, df_running_by_p, df_stw_by_kind, gc_cpu_text

    path = Path(a.file)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG  # read_trace says it is missing
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror}); give a trace file") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path}: is a directory; give a trace file, e.g. {path / 'trace.out'}")
    if not stat.S_ISREG(mode):
        # a FIFO would block the read, /dev/zero never end it
        raise UsageError(f"{path}: not a regular file; give a trace file (runtime/trace, /debug/pprof/trace)")
    size = path.stat().st_size if path.exists() else 0
    tr = read_trace(path)
    m = tr.meta
    span = (m["last_ns"] - m["first_ns"]) / 1e9
    print(f"{path}: go 1.{m['version']} trace, {m['events']:,} events, {size:,} bytes, {m['generations']} generations")
    print(f"span: {span:.3f} s  (CLOCK_MONOTONIC {m['first_ns']} .. {m['last_ns']} ns)")
    if m.get("zero_tail") is not None:
        print(f"ZERO BYTES from offset {m['zero_tail']} to the end (a crash's unwritten tail): taken as the end")
    if m.get("unclosed") is not None:
        u = m["unclosed"]
        print(
            f"NOT CLOSED: the last generation ({u['generation']}, from offset {u['offset']}) lacks the tables the "
            "runtime writes when a generation ends (the process stopped without trace.Stop): left out"
        )
    elif m["truncated"] is not None:
        print(f"TRUNCATED at offset {m['truncated']}: the complete generations before it were read")
    gc = tr.gc
    if len(gc):
        mark = (gc.end_ns - gc.start_ns) / 1e6
        print(f"GC cycles: {len(gc)}  (mark phase p50 {mark.median():.2f} ms, max {mark.max():.2f} ms)")
    else:
        print("GC cycles: 0")
    print(
        "GOMAXPROCS: "
        + (
            ", ".join(f"{v} at +{(t - m['first_ns']) / 1e9:.3f}s" for t, v in tr.gomaxprocs.itertuples(index=False))
            or "no event"
        )
    )
    with pd.option_context("display.width", 120, "display.float_format", "{:.1f}".format):
        stw = df_stw_by_kind(tr)
        print("\nstop-the-world pauses by kind (µs):")
        print(stw.to_string(index=False) if len(stw) else "  none")
        print("\ngoroutine running time per P (wall time on the P, see the note):")
        print(df_running_by_p(tr).to_string(index=False))
    print(RUNNING_NOTE)
    print()
    print(gc_cpu_text(tr))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from .bundle import load_run
    from .report import recording_notes, to_report

    out = check_out_file(a.out, "-o")
    paths = [Path(p) for p in a.bundles] or _default_bundles()
    check_not_inside(out, paths, "-o")
    if not paths:
        print("no bundles given and no example runs found; pass bundle directories", file=sys.stderr)
        return 2
    runs, loading_notes = [], []
    with warnings.catch_warnings():
        # library noise (pandas, matplotlib) stays quiet; every GmpWarning is recorded instead
        # (here while loading, inside to_report while analysing) and shown in the report's
        # Data notes and below on stderr
        warnings.simplefilter("ignore")
        for p in paths:
            with recording_notes([]) as found:
                runs.append(load_run(p))
            loading_notes.append(found)
        out = _tolerating_traces(runs, lambda rs: to_report(rs, out, notes=loading_notes, progress=progress), say=False)
    for p, run, found in zip(paths, runs, loading_notes, strict=True):
        for n in dict.fromkeys([*run.notes, *found]):
            print(f"{p}: note: {n}", file=sys.stderr)
    print(out)
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .bundle import load_run
    from .export import to_chrome_trace

    out = check_out_file(a.out, "-o")
    check_not_inside(out, [a.bundle], "-o")
    print(to_chrome_trace(load_run(a.bundle), out))
    return 0


def cmd_collect(a: argparse.Namespace) -> int:
    from .kube import CollectConfig, collect

    check_out_dir(a.out, "--out", empty=False)
    cfg = CollectConfig(
        namespace=a.namespace,
        pod=a.pod,
        selector=a.selector,
        container=a.container,
        duration_s=a.duration,
        pprof_port=None if a.pprof_port == 0 else a.pprof_port,
        pprof_host=a.pprof_host,
        pprof_path=a.pprof_path,
        out=Path(a.out),
        kubeconfig=a.kubeconfig,
        context=a.context,
        sampler_namespace=a.sampler_namespace,
    )
    # progress names pods as the API server sent them: escape what does not print
    for p in collect(cfg, log=lambda m: progress(_one_line(m))):
        print(p)
    return 0


DEFAULT_INPUT = (
    "bundle directories (default: the example runs: $GMP_DATA if set, else a source checkout's "
    "fixtures/runs, else the copy inside the installed package)"
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gmpanalysis", description="CFS CPU quotas and the Go runtime, period by period.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    sp = sub.add_parser("summary", help="runs side by side, per-period metrics (default: the example runs)")
    sp.add_argument("bundles", nargs="*", help=DEFAULT_INPUT)
    sp.set_defaults(func=cmd_summary)

    rp = sub.add_parser("report", help="self-contained HTML report (default: the example runs)")
    rp.add_argument("bundles", nargs="*", help=DEFAULT_INPUT)
    rp.add_argument("-o", "--out", default="report.html", help="output HTML file (default: report.html)")
    rp.set_defaults(func=cmd_report)

    ep = sub.add_parser("export", help="Chrome trace-event JSON of a bundle, for ui.perfetto.dev")
    ep.add_argument("bundle", help="bundle directory")
    ep.add_argument("-o", "--out", default="trace.json", help="output JSON (default: trace.json)")
    ep.set_defaults(func=cmd_export)

    cp = sub.add_parser("collect", help="bundles from pods in a Kubernetes cluster (needs the [kube] extra)")
    cp.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: the standard lookup)")
    cp.add_argument("--context", default=None, help="kubeconfig context")
    cp.add_argument("-n", "--namespace", required=True, help="the target pods' namespace")
    who = cp.add_mutually_exclusive_group(required=True)
    who.add_argument("--pod", help="target pod name")
    who.add_argument("-l", "--selector", help="label selector of target pods")
    cp.add_argument("--container", default=None, help="container (default: the pod's first)")
    cp.add_argument(
        "--duration", type=duration(0, 3600, lo_open=True), default=30.0, help="window, e.g. 30s (default: 30s)"
    )
    cp.add_argument("--pprof-port", type=int_in(0, 65535), default=6060, help="net/http/pprof port (0: no trace)")
    cp.add_argument(
        "--pprof-host", default=None, help="Host header of the trace request (default: 127.0.0.1:PORT, what is dialled)"
    )
    cp.add_argument("--pprof-path", default="/debug/pprof/trace", help="path of the trace endpoint")
    cp.add_argument("--sampler-namespace", default="gmp-system", help="namespace of the sampler DaemonSet")
    cp.add_argument("--out", default="runs", help="directory for the bundles (default: runs)")
    cp.set_defaults(func=cmd_collect)

    tp = sub.add_parser("trace", help="summary of a Go execution trace file")
    tp.add_argument("file", help="trace file (runtime/trace, go test -trace, /debug/pprof/trace)")
    tp.set_defaults(func=cmd_trace)

    add_advise_args(
        sub.add_parser("advise", help="CPU limit, GOMAXPROCS and burst ranked by a replay of the runs' demand")
    )

    fl = sub.add_parser("fleet", help="every bundle of a store or of bundle directories analysed on Dask")
    fl.add_argument("sources", nargs="+", help="a store (local directory or fsspec URL) or bundle directories")
    fl.add_argument("-o", "--out", default=None, help="where the Parquet tables and report go (default: STORE/derived)")
    fl.add_argument("--scheduler", default=None, help="a running Dask scheduler's address (default: a local cluster)")
    fl.add_argument("--workers", type=int_in(1, 1024), default=None, help="local cluster workers (default: the CPUs)")
    fl.add_argument("--top", type=int_in(1), default=20, help="workloads to print (default: 20)")
    fl.add_argument("--no-progress", action="store_true", help="no progress bar")
    fl.set_defaults(func=cmd_fleet)
    st = sub.add_parser("store", help="the bundle store: put bundles in, list them")
    stsub = st.add_subparsers(dest="storecmd", required=True)
    sp = stsub.add_parser("put", help="copy bundle directories into a store (a capture stored twice is one bundle)")
    sp.add_argument(
        "bundles", nargs="+", help="run bundle directories, or directories of them (gmp-agent's --out: finished ones)"
    )
    sp.add_argument("--store", required=True, help="the store: a local directory or an fsspec URL")
    sp.add_argument("--cluster", default=None, help="cluster name for bundles whose meta.json has none")
    sp.add_argument("--move", action="store_true", help="remove each bundle once it is in the store (empties a spool)")
    sp.set_defaults(func=cmd_store_put)
    sl = stsub.add_parser("ls", help="the keys of a store's bundles")
    sl.add_argument("store", help="the store")
    sl.set_defaults(func=cmd_store_ls)
    lab = sub.add_parser("lab", help="experiments under real cgroup quotas (root)")
    labsub = lab.add_subparsers(dest="labcmd", required=True)
    lr = labsub.add_parser("run", help="one run -> one bundle")
    add_lab_args(lr)
    lr.add_argument(
        "--gomaxprocs",
        type=gomaxprocs_value,
        default=None,
        help="GOMAXPROCS env of the app, a positive integer; 'default' or 'unset': not set (the default)",
    )
    lr.add_argument("-o", "--out", default=None, help="bundle directory (default: runs/NAME)")
    lr.set_defaults(func=cmd_lab_run)
    ls = labsub.add_parser("sweep", help="the same run at several GOMAXPROCS values")
    add_lab_args(ls)
    ls.add_argument(
        "--gomaxprocs-values",
        type=gomaxprocs_values,
        default="1,2,8",
        help="comma list, 'unset' allowed (default: 1,2,8)",
    )
    ls.add_argument("-o", "--out", default="runs", help="directory for the bundles (default: runs)")
    ls.set_defaults(func=cmd_lab_sweep)
    lc = labsub.add_parser("clean", help="remove the cgroups left by lab runs that were killed")
    lc.add_argument("--cgroup-root", type=existing_dir, default="/sys/fs/cgroup", help="cgroup mount")
    lc.add_argument("--cgroup-parent", type=cgroup_parent, default="", help="parent cgroup the runs used")
    lc.set_defaults(func=cmd_lab_clean)
    return ap


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    # the data was read but something in it is off: say it as a message, not as the Python
    # source line that happened to issue it
    what = "warning" if issubclass(category, GmpWarning) else category.__name__
    print(f"gmpanalysis: {what}: {message}", file=file or sys.stderr)


def _one_line(text: str) -> str:
    """An error message as one terminal line: its lines joined with "; ", characters that
    do not print (escape sequences, lone surrogates from undecodable names) escaped."""
    text = "; ".join(x.strip() for x in text.splitlines() if x.strip())
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in text)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    # names come from files and directories: a lone surrogate (an undecodable byte) in one
    # is printed escaped rather than ending the command with UnicodeEncodeError
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    showwarning = warnings.showwarning
    warnings.showwarning = _show_warning
    if sys.stderr.isatty():
        from .gotrace import reader

        reader.PROGRESS_BAR_BYTES = 50 << 20  # a big trace takes seconds: show how far it is
    try:
        return a.func(a)
    except BrokenPipeError:
        # the reader went away (`gmpanalysis summary | head`): nothing more to say to it; point
        # stdout at /dev/null so the interpreter's final flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command ended by a closed pipe
    except GmpError as e:
        # every error raised on purpose: one line, exit 2; anything else is a bug and keeps
        # its traceback
        print(f"gmpanalysis: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gmpanalysis: interrupted; processes stopped and cgroups removed", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = showwarning


if __name__ == "__main__":
    sys.exit(main())
