"""`make mutation`: mutmut, once per module, each with only the tests that should kill it.

mutmut reads one configuration from the directory it runs in, so each module gets a work
directory of its own, `.mutation/<module>/`: links to the packages and tests, the project's
pyproject.toml, and a generated setup.cfg naming the module to mutate and its tests. The kill
rate is over the mutants not judged equivalent in mutation/equivalents.toml (docs/testing.md).

    .venv/bin/python mutation/run.py [MODULE ...]     # default: every module below
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENTS = Path(__file__).resolve().with_name("equivalents.toml")
MUTMUT = str(Path(sys.executable).with_name("mutmut"))  # not `python -m mutmut`: it warns

# The checks and the transactions asset share their tests: the rules on their own first, then
# the asset's landing called directly against a sandbox (which also calls, in this process,
# what the worker pools run in forked processes: mutmut sees only in-process calls, see
# docs/testing.md), then whole Dagster runs against sandboxes (~30 s between them).
ASSET_TESTS = ["tests/assets/test_checks.py",
               "tests/assets/test_transactions_rules.py",
               "tests/assets/test_transactions_landing.py",
               "tests/assets/test_source_wins.py",
               "tests/assets/test_products.py"]
# module -> (the tests that target it, cheapest first, and the least kill rate of its
# non-equivalent mutants, or None while the module is not judged). The client's retry tests
# against the real sandbox (test_retries_sandbox.py, seconds of Retry-After each) and its
# secret-key tests stay out: test_client_wire.py and test_faults.py script the same faults.
MODULES: dict[str, tuple[list[str], float | None]] = {
    "resources/inbox/store.py": (["tests/resources/test_inbox_events.py",
                           "tests/resources/test_inbox.py",
                           "tests/resources/test_inbox_postgres.py",
                           "tests/pipeline/test_receiver.py"], 90.0),
    "resources/inbox/callbacks.py": (["tests/resources/test_inbox_events.py",
                                      "tests/resources/test_inbox.py",
                                      "tests/pipeline/test_receiver.py"], None),
    "resources/client/sdk.py": (["tests/resources/test_client_wire.py",
                             "tests/resources/test_faults.py",
                             "tests/resources/test_transaction_pages.py",
                             "tests/resources/test_client_sandbox.py",
                             "tests/resources/test_page_ranges.py"], 90.0),
    "assets/checks.py": (ASSET_TESTS, 90.0),
    "assets/transactions.py": (ASSET_TESTS, 90.0),
}
# pytest options of every run: the slow end-to-end tests stay out, a mutant that makes a test
# hang (a retry that sleeps for ever) fails it after 60 s instead of 300, and the tests run in
# the order their files are listed above (mutation/order.py)
PYTEST_ARGS = ["-m", "not slow", "--timeout=60", "-p", "mutation.order"]
PACKAGES = ["pipeline", "assets", "resources", "sandbox"]
ALSO_COPY = ["workspace.yaml", "dagster.yaml", "docs", "mutation"]
KILLED = {"killed", "timeout", "segfault"}
STATUS = {0: "survived", 1: "killed", 3: "killed", 5: "no tests", 33: "no tests",
          34: "skipped", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout",
          255: "timeout", -9: "segfault", -11: "segfault", None: "not checked"}


# Run in a work directory: each named mutant's diff, headed by the line of the source file it
# changes (mutmut's own diff counts lines from the function's `def`).
SHOW = r"""
import ast, re, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.utils.format_utils import orig_function_and_class_names_from_key

path, names = sys.argv[1], sys.argv[2:]
tree = ast.parse(open(path).read())
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
defs = {}
for node in ast.walk(tree):
    if isinstance(node, ast.ClassDef):
        defs.update({(f.name, node.name): f.lineno for f in node.body if isinstance(f, FUNCS)})
    elif isinstance(node, FUNCS):
        defs.setdefault((node.name, None), node.lineno)
out = []
for name in names:
    diff = get_diff_for_mutant(name, path=path)
    line = "?"
    first = defs.get(orig_function_and_class_names_from_key(name))
    hunk = re.search(r"^@@ -(\d+)", diff, re.M)
    body = diff[hunk.end():].splitlines()[1:] if hunk else []
    cut = next((i for i, text in enumerate(body) if text.startswith("-")), None)
    if first and cut is not None:  # the hunk's start, and the context lines before the cut
        line = first + int(hunk.group(1)) - 1 + sum(t.startswith(" ") for t in body[:cut])
    out.append(f"line {line}\n{diff}")
print("\0".join(out), end="")
"""


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def prepare(module: str, tests: list[str]) -> Path:
    """A fresh work directory for `module`: links to the code, a setup.cfg for mutmut."""
    work = WORK / slug(module)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in [*PACKAGES, "tests", *ALSO_COPY]:
        if (ROOT / name).exists():
            (work / name).symlink_to(os.path.relpath(ROOT / name, work))
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")

    def lines(values: list[str]) -> str:
        return "".join(f"\n    {v}" for v in values)

    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        f"source_paths ={lines(PACKAGES)}\n"
        f"only_mutate =\n    {module}\n"
        f"also_copy ={lines(ALSO_COPY)}\n"
        f"pytest_add_cli_args_test_selection ={lines(tests)}\n"
        f"pytest_add_cli_args ={lines(PYTEST_ARGS)}\n"
        "use_git_change_detection = false\n"
        # each mutant's tests in a process forked from a server that ran no test: forked from
        # one that had written Delta, delta-rs's runtime panics and every mutant looks killed
        "process_isolation = forkserver\n")
    return work


def equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """The mutants judged equivalent, each with its judgement in one line (change: reason).

    Raises ValueError naming the entry that is not as the file's header describes.
    """
    import tomllib

    data = tomllib.loads(path.read_text(encoding="utf-8"))
    kinds = data.pop("kinds", {})
    judged: dict[str, str] = {}
    for module, entries in data.items():
        if module not in MODULES:
            raise ValueError(f"[{module}] is not a module `make mutation` runs")
        for name, entry in entries.items():
            where = f"[{module}] {name}"
            if not (name.startswith(slug(module) + ".") and re.search(r"__mutmut_\d+$", name)):
                raise ValueError(f"{where}: not the name of one of this module's mutants")
            fields = set(entry) if isinstance(entry, dict) else set()
            if "change" not in fields or not fields & {"kind", "why"} or fields - {
                    "change", "kind", "why"}:
                raise ValueError(f"{where}: needs a change and a kind or a why, nothing else")
            if "kind" in entry and entry["kind"] not in kinds:
                raise ValueError(f"{where}: kind {entry['kind']!r} is not one of [kinds]")
            reasons = [kinds.get(entry.get("kind"), ""), entry.get("why", "")]
            judged[name] = f"{entry['change']}: {'; '.join(r for r in reasons if r)}"
    return judged


def results(work: Path, module: str) -> dict[str, str]:
    meta = json.loads((work / "mutants" / (module + ".meta")).read_text())
    return {k: STATUS.get(v, "suspicious") for k, v in meta["exit_code_by_key"].items()}


def report(module: str, work: Path, seconds: float, floor: float | None,
           judged: dict[str, str]) -> tuple[bool, str]:
    got = results(work, module)
    counts = Counter(got.values())
    killed = sum(1 for s in got.values() if s in KILLED)
    survivors = sorted(k for k, s in got.items() if s not in KILLED)
    equivalent = [k for k in survivors if k in judged]
    stale = sorted(k for k in judged if k.startswith(slug(module) + ".") and k not in survivors)
    live = len(got) - len(equivalent)
    rate = 100.0 * killed / live if live else 100.0
    # every survivor's diff, for whoever kills the next one (one process: mutmut's own reader)
    shown = subprocess.run(
        [sys.executable, "-c", SHOW, module, *survivors], cwd=work, capture_output=True,
        text=True).stdout.split("\0")
    with open(work / "survivors.txt", "w") as out:
        for name, diff in zip(survivors, shown, strict=False):
            tag = f"  (equivalent: {judged[name]})" if name in judged else ""
            out.write(f"{name}: {got[name]}{tag}\n{diff}\n\n")
    text = (f"{module}: {len(got)} mutants, {killed} killed, {len(equivalent)} equivalent, "
            f"{len(survivors) - len(equivalent)} not killed; kill rate of non-equivalent "
            f"{rate:.1f}%" + (f" (floor {floor:g}%)" if floor is not None else " (not judged)")
            + f"; {seconds:.0f}s\n    by status: {dict(sorted(counts.items()))}\n"
            + f"    survivors and their diffs: {work.relative_to(ROOT)}/survivors.txt")
    if stale:
        text += ("\n    listed in mutation/equivalents.toml but not a survivor now "
                 "(renumbered or killed): " + ", ".join(stale))
    return floor is None or rate >= floor, text


def stop_clusters(scratch: Path) -> None:
    """Stop every Postgres cluster (tests/postgres.py) left under `scratch`, then delete it."""
    if str(ROOT) not in sys.path:  # run as a script: its own folder is first, not the project
        sys.path.insert(0, str(ROOT))
    from tests.postgres import PostgresServer, find_bin

    folder = find_bin()
    for root in scratch.glob("ledgerlake-pg-*"):
        if folder is not None and (root / "data" / "postmaster.pid").exists():
            PostgresServer(folder, root=root).stop("immediate")
    shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str]) -> int:
    chosen = argv or list(MODULES)
    if unknown := [m for m in chosen if m not in MODULES]:
        print(f"unknown module(s) {unknown}; known: {list(MODULES)}", file=sys.stderr)
        return 2
    try:
        judged = equivalents()
    except (OSError, ValueError) as exc:  # tomllib's TOMLDecodeError is a ValueError
        print(f"{EQUIVALENTS.relative_to(ROOT)}: {exc}", file=sys.stderr)
        return 2
    lines, ok, begun = [], True, time.monotonic()
    for module in chosen:
        tests, floor = MODULES[module]
        if missing := [t for t in tests if not (ROOT / t).exists()]:
            print(f"{module}: no such test file(s) {missing}", file=sys.stderr)
            return 2
        work = prepare(module, tests)
        print(f"== {module}: mutmut in {work.relative_to(ROOT)}", flush=True)
        started = time.monotonic()
        # `mutmut run` prints a progress line per mutant; keep its log, show its tail
        env = {**os.environ, "LEDGERLAKE_MUTATION_ORDER": ",".join(tests)}  # mutation/order.py
        # a mutant's tests killed at their timeout skip their teardown and leave their
        # Postgres cluster running: they make it under a folder of the run's, stopped after
        env["TMPDIR"] = scratch = tempfile.mkdtemp(prefix="ledgerlake-mutation-")
        os.chmod(scratch, 0o755)  # the clusters' folders are the postgres user's, inside it
        try:
            with open(work / "mutmut.log", "w") as log:
                code = subprocess.run([MUTMUT, "run"], cwd=work, stdout=log,
                                      stderr=subprocess.STDOUT, env=env).returncode
        finally:
            stop_clusters(Path(scratch))
        seconds = time.monotonic() - started
        if code != 0 or not (work / "mutants" / (module + ".meta")).exists():
            # say so and go on with the next module (a clean run that fails, say)
            tail = (work / "mutmut.log").read_text(errors="replace")[-2000:]
            text = (f"{module}: mutmut failed (exit {code}) after {seconds:.0f}s; log: "
                    f"{work.relative_to(ROOT)}/mutmut.log")
            print(f"{tail}\n{text}", file=sys.stderr, flush=True)
            lines.append(text)
            ok = False
            continue
        good, text = report(module, work, seconds, floor, judged)
        print(text, flush=True)
        lines.append(text)
        ok &= good
    print("\n" + "\n".join(lines), f"\nall: {time.monotonic() - begun:.0f}s", sep="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
