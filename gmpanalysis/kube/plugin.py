"""``kubectl gmp``: the kubectl plugin (the ``kubectl-gmp`` executable kubectl finds on PATH).

    kubectl gmp collect POD [-n NS] [--context CTX]   # gmpanalysis collect -n NS --pod POD
    kubectl gmp report POD  [-n NS] [-o report.html]  # collect, then gmpanalysis report of the bundle
    kubectl gmp advise POD  [-n NS] [--objective p99] # collect, then gmpanalysis advise of the bundle

Each verb is the ``gmpanalysis`` command line (:func:`plan` builds its arguments and
:func:`gmpanalysis.cli.main` runs them), so options, messages and exit codes are the CLI's.
kubectl passes a plugin none of its own flags: ``-n/--namespace``, ``--context`` and
``--kubeconfig`` are read here, and without ``-n`` the namespace is the kubeconfig context's,
as for kubectl.
"""

from __future__ import annotations

import argparse
import io
import sys
from dataclasses import dataclass
from typing import Any

PROG = "kubectl gmp"
BUNDLES = "{bundles}"  # in Plan.then: where the collected bundles' paths go


@dataclass
class Plan:
    """The ``gmpanalysis`` command lines of one plugin call: ``collect``, then (report,
    advise) ``then`` with the collected bundles' paths where :data:`BUNDLES` stands."""

    collect: list[str]
    then: list[str] | None = None

    def then_with(self, bundles: list[str]) -> list[str]:
        assert self.then is not None
        i = self.then.index(BUNDLES)
        return [*self.then[:i], *bundles, *self.then[i + 1 :]]


def _collect_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", metavar="POD", help="the pod to collect from")
    p.add_argument("-n", "--namespace", help="the pod's namespace (default: the kubeconfig context's, else default)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("-c", "--container", help="container (default: the pod's first)")
    p.add_argument("--duration", help="collection window, e.g. 30s (default: 30s)")
    p.add_argument("--pprof-port", help="the pod's net/http/pprof port for the Go trace (0: no trace; default: 6060)")
    p.add_argument("--sampler-namespace", help="where the chart installed the sampler DaemonSet (default: gmp-system)")
    p.add_argument("--out", help="directory the bundles are written under (default: runs)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="CFS CPU quotas and the Go runtime of a pod, period by period: the gmpanalysis command "
        "line as a kubectl plugin (pip install 'gmpanalysis[kube]').",
        epilog="Each verb runs `gmpanalysis collect` on the pod (the sampler DaemonSet of charts/gmpanalysis "
        "must run on its node); report and advise then run on the bundle it wrote. "
        "`gmpanalysis --help` has the other commands.",
    )
    sub = ap.add_subparsers(dest="verb", required=True, metavar="{collect,report,advise}")
    c = sub.add_parser("collect", help="a bundle of the pod's CFS periods and Go trace (gmpanalysis collect)")
    _collect_options(c)
    r = sub.add_parser("report", help="collect, then the self-contained HTML report of the bundle")
    _collect_options(r)
    r.add_argument("-o", "--output", default="report.html", help="the HTML file (default: report.html)")
    a = sub.add_parser("advise", help="collect, then CPU limit, GOMAXPROCS and burst ranked by a replay")
    _collect_options(a)
    a.add_argument("--objective", help="throttle, p99 or cost (default: p99)")
    a.add_argument("--top", help="rows to print (default: 10)")
    a.add_argument("--cpus", help="CPUs the service may use (default: the run's)")
    a.add_argument("--max-limit", help="largest limit to consider, CPUs")
    a.add_argument(
        "--bursts",
        default="0",
        help="bursts to weigh, shares of the quota (default: 0, none: a pod spec sets no cpu.max.burst; 0,1 to "
        "weigh one the node sets)",
    )
    return ap


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (the current one unless named), as kubectl
    takes it when no -n is given; "default" where none is set or no kubeconfig is read."""
    try:
        from kubernetes import config

        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # no kubernetes package, no kubeconfig: collect will say what is missing
        return "default"
    ctx = current if context is None else next((c for c in contexts if c.get("name") == context), None)
    return ((ctx or {}).get("context") or {}).get("namespace") or "default"


def _opt(argv: list[str], flag: str, value: str | None) -> None:
    if value is not None:
        argv += [flag, value]


def plan(argv: list[str]) -> Plan:
    """The ``gmpanalysis`` command lines for a ``kubectl gmp`` command line."""
    a = build_parser().parse_args(argv)
    ns = a.namespace or context_namespace(a.kubeconfig, a.context)
    collect = ["collect", "-n", ns, "--pod", a.pod]
    for flag, value in (
        ("--context", a.context),
        ("--kubeconfig", a.kubeconfig),
        ("--container", a.container),
        ("--duration", a.duration),
        ("--pprof-port", a.pprof_port),
        ("--sampler-namespace", a.sampler_namespace),
        ("--out", a.out),
    ):
        _opt(collect, flag, value)
    out = Plan(collect)
    if a.verb == "report":
        out.then = ["report", BUNDLES, "-o", a.output]
    elif a.verb == "advise":
        out.then = ["advise", BUNDLES]
        for flag, value in (
            ("--objective", a.objective),
            ("--top", a.top),
            ("--cpus", a.cpus),
            ("--max-limit", a.max_limit),
            ("--bursts", a.bursts),
        ):
            _opt(out.then, flag, value)
    return out


class _Tee(io.TextIOBase):
    """stdout that also keeps what passes (collect prints one bundle path a line)."""

    def __init__(self, out: io.TextIOBase) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


def _checked(p: Plan, cli: Any) -> bool:
    """Both command lines parsed, and the report's file checked, before the collection (a
    wrong option or output path found after a 30 s collection costs the collection)."""
    from ..cliargs import check_out_file
    from ..errors import UsageError

    parser = cli.build_parser()
    lines = [p.collect] + ([] if p.then is None else [p.then_with(["BUNDLE"])])
    for line in lines:
        try:
            args = parser.parse_args(line)
        except SystemExit:  # argparse said why, as gmpanalysis VERB
            print(f"{PROG}: error: {line[0]}: the options above are refused; nothing was collected", file=sys.stderr)
            return False
        if line[0] == "report":
            try:
                check_out_file(args.out, "-o")
            except UsageError as e:
                print(f"{PROG}: error: {e}; nothing was collected", file=sys.stderr)
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    from contextlib import redirect_stdout

    from .. import cli

    p = plan(sys.argv[1:] if argv is None else argv)
    if not _checked(p, cli):
        return 2
    tee = _Tee(sys.stdout)
    with redirect_stdout(tee):
        rc = cli.main(p.collect)
    if rc != 0 or p.then is None:
        return rc
    bundles = [ln for ln in tee.kept.getvalue().splitlines() if ln.strip()]
    if not bundles:
        print(f"{PROG}: error: collect wrote no bundle", file=sys.stderr)
        return 2
    return cli.main(p.then_with(bundles))


if __name__ == "__main__":
    sys.exit(main())
