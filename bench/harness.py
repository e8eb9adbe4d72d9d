"""What every bench shares: a sandbox to read, rounds that take turns, figures with their
spread, the machine and commit they were measured on, and where they are written.

A bench measures against a peer in the same run, in rounds whose order rotates (this machine's
speed drifts by tens of percent over minutes), and publishes its result to
bench/results/<name>.json and its table between `<!-- name:begin -->` and `<!-- name:end -->`
in bench/README.md. Imports only the standard library at the top: bench/run.py's dlt child
imports it under another environment.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "bench" / "README.md"
# the sandbox as the ingest benches read it: no rate limit, and no line added while they read
STILL = ("--rate-limit", "0", "--addition-limit", "1000000", "--freeze-clock")
# identity is sealed with a throwaway key, as in the tests (only `ledgerlake keys new`, `demo`
# and `dev` make a key file)
os.environ.setdefault("LEDGERLAKE_PII_KEY", secrets.token_hex(32))
STACK = ("dagster", "deltalake", "duckdb", "pyarrow", "pandas", "httpx")


class Sandbox(NamedTuple):
    url: str
    key: str  # the test environment's secret key
    pid: int

    def api(self, timeout: float = 120):
        """An httpx client of the test environment (/sandbox/v2/), authorised."""
        import httpx

        return httpx.Client(base_url=self.url + "/sandbox/v2/", timeout=timeout,
                            headers={"Authorization": f"Bearer {self.key}"})


@contextmanager
def sandbox(work: Path, seed: int, *options: str) -> Iterator[Sandbox]:
    """The sandbox as a child process on loopback, its state and log under `work`."""
    from pipeline.local import Server

    key = "sk_test_" + secrets.token_hex(12)
    with Server("sandbox", "--data-dir", str(work / "sandbox"), "--seed", str(seed), *options,
                env={"LEDGERLAKE_SANDBOX_KEY": key,
                     "LEDGERLAKE_PRODUCTION_KEY": "sk_live_" + secrets.token_hex(12)},
                log_path=work / "sandbox.log") as server:
        yield Sandbox(server.url, key, server.proc.pid)


# -- rounds and figures ------------------------------------------------------------------------

def rotated(items: Sequence, k: int) -> list:
    """Round k's order: items rotated by k, so that none always goes first."""
    k %= len(items)
    return [*items[k:], *items[:k]]


def ratios(numerators: Sequence[float], denominators: Sequence[float], digits: int = 3) -> dict:
    """The ratio taken within each round (its two runs seconds apart), and their median."""
    each = [a / b for a, b in zip(numerators, denominators, strict=False)]
    return {"median": round(statistics.median(each), digits),
            "rounds": [round(x, digits) for x in each]}


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: Sequence[float], digits: int = 4) -> dict:
    return {"n": len(values), "median": round(statistics.median(values), digits),
            "p90": round(percentile(values, 0.9), digits),
            "min": round(min(values), digits), "max": round(max(values), digits)}


def timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """Seconds of each of `runs` calls of fn, and what the last one returned."""
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


# -- processes, from /proc ---------------------------------------------------------------------

def family(pid: int) -> list[int]:
    """`pid` and all its descendants (children of every thread, not only the main one's)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        with suppress(OSError):  # gone since it was listed
            if entry.name.isdigit():
                parent = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def cpu_seconds(pids: Iterable[int]) -> float:
    """User and system CPU seconds these processes have used so far (those gone count 0)."""
    ticks = 0
    for pid in pids:
        with suppress(OSError):  # gone: it counts 0
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


# -- where and how it ran ----------------------------------------------------------------------

def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), None)  # Linux, as family() and the rest
    installed = {d.metadata["Name"].lower(): d.version for d in md.distributions()}
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "versions": {dist: installed.get(dist) for dist in STACK}}


def commit() -> str | None:
    """HEAD's short hash, marked when tracked files differ from it."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode:
        return None
    changed = git("diff-index", "--quiet", "HEAD", "--").returncode != 0
    return head.stdout.strip() + (" with uncommitted changes" if changed else "")


# -- results -----------------------------------------------------------------------------------

def arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--out", type=Path,
                        help=f"the result's JSON (default bench/results/{name}.json, whose "
                             "table goes to bench/README.md)")
    parser.add_argument("--readme", type=Path, help="rewrite the result's table in this README")
    parser.add_argument("--no-readme", action="store_true", help="leave every README as it is")


def publish(result: dict, args: argparse.Namespace, name: str, table: str) -> dict:
    """`result`, stamped with when, at which commit, where and by which command it was measured,
    written to args.out (default bench/results/<name>.json); `table` printed, and written between
    `name`'s markers in args.readme (default bench/README.md, unless --out was given)."""
    result = {**result, "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "commit": commit(), "machine": machine(),
              "command": " ".join([f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])}
    out = args.out or RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    if (readme := args.readme or (None if args.out else README)) and not args.no_readme:
        m = result["machine"]
        stamp = (f"Measured {result['measured_at']} at {result['commit'] or 'an unknown commit'}"
                 f" on {m['cpus']} cores ({m['cpu'] or 'cpu unknown'}), load "
                 f"{m['load_avg_1m']}: `{result['command']}`.")
        write_marked(readme, name, stamp + "\n\n" + table)
    print(table, flush=True)
    return result


def table(head: Sequence[str], rows: Iterable[Sequence[object]], left: int = 1) -> str:
    """A Markdown table, its first `left` columns aligned left and the rest right."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * left + "---:|" * (len(head) - left)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_marked(path: Path, marker: str, text: str) -> None:
    """`text` in place of what stands between `path`'s `<!-- marker:begin/end -->` lines."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    old = path.read_text()
    if begin not in old or end not in old:
        raise ValueError(f"{path} has no {begin} ... {end}")
    head, rest = old.split(begin, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")
