"""Cold-compile audit: how long numba takes to compile prepkit's CPU kernels from an empty
cache, where that time goes, and which kernels were compiled more than once.

Each part of ``prepkit.warmup`` (decode, encode, reader) runs in a fresh process with an empty
``NUMBA_CACHE_DIR``, one after the other, so the times are one core's. numba's compile events
give each function's own time (its callees' compiles taken out) and every signature it was
compiled for. A kernel compiled for two signatures costs its compile twice, with every
separately compiled function it calls: a literal argument (``Literal[int](0)``) is the usual
cause (tests/test_jit_calls.py guards the source against it), array types that differ in
dtype, layout or read-only flag the other. The exit status is 1 when a kernel outside
``EXPECTED_TWICE`` was compiled for more than one signature.

    python -m prepkit.bench.compile_audit [decode encode reader] [--top 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# Kernels whose two signatures are two real uses: runs.sure on one tile's counts (compiled
# code) and on every tile's at once (numpy arrays, from Python); the runs tokenizer over a grey
# tile's pixels (uint8) and over a colour tile's palette indices (int32); table_sets._entries
# over the encoder's uint16 histograms and the reference encoder's int64 counts.
EXPECTED_TWICE = {"runs.sure", "runs.tile_symbols", "cpu_v2._tile_runs", "table_sets._entries"}


def _child(part: str) -> dict:
    """Run one warm-up part here (NUMBA_CACHE_DIR already empty) and report its compiles."""
    from numba.core import event

    records: list[tuple[str, tuple[str, ...], float]] = []
    stack: list[list[float]] = []

    class Listener(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            stack.append([time.perf_counter(), 0.0])

        def on_end(self, ev: event.Event) -> None:
            start, children = stack.pop()
            took = time.perf_counter() - start
            if stack:
                stack[-1][1] += took
            function = ev.data["dispatcher"].py_func
            name = function.__module__.rsplit(".", 1)[-1] + "." + function.__qualname__
            if function.__module__.startswith("prepkit"):
                records.append((name, tuple(str(a) for a in ev.data["args"]), took - children))

    event.register("numba:compile", Listener())
    from prepkit import warmup

    start = time.perf_counter()
    warmup.PARTS[part]()
    seconds = time.perf_counter() - start
    own: dict[str, float] = defaultdict(float)
    signatures: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for name, args, took in records:
        own[name] += took
        signatures[name].add(args)
    return {"part": part, "seconds": seconds, "compiles": len(records), "own_seconds": dict(own),
            "signatures": {name: sorted(sigs) for name, sigs in signatures.items()}}


def audit_part(part: str) -> dict:
    """Run ``part`` in a new process with an empty numba cache; its compile report."""
    with tempfile.TemporaryDirectory(prefix="prepkit-audit-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-m", "prepkit.bench.compile_audit", "--child", part], env=env,
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"compile audit of part {part!r} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differences(signatures: list[list[str]]) -> list[str]:
    """The arguments in which a kernel's signatures differ: 'argument k: type | type'."""
    lines = []
    for k in range(max(len(s) for s in signatures)):
        types = sorted({s[k] if k < len(s) else "(none)" for s in signatures})
        if len(types) > 1:
            lines.append(f"argument {k}: " + " | ".join(types))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", default=["decode", "encode", "reader"])
    parser.add_argument("--top", type=int, default=15, help="list the functions with the most own compile time")
    parser.add_argument("--json", help="write the reports to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child)))
        return 0
    reports = []
    twice: list[str] = []
    for part in args.parts:
        report = audit_part(part)
        reports.append(report)
        print(f"== {part}: {report['seconds']:.1f} s cold, {report['compiles']} compiles")
        for name, took in sorted(report["own_seconds"].items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"   {took:6.1f} s  {name}")
        for name, sigs in sorted(report["signatures"].items()):
            if len(sigs) > 1:
                expected = name in EXPECTED_TWICE
                print(f"   {'(expected) ' if expected else 'TWICE '}{name}: {len(sigs)} signatures")
                if not expected:
                    twice.append(name)
                    for line in _differences(sigs):
                        print(f"      {line}")
    if args.json:  # (make compile-audit writes into out/, which a fresh clone lacks)
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(reports, indent=1))
    if twice:
        print(f"compiled for more than one signature: {', '.join(sorted(set(twice)))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
