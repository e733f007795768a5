"""Same-process A/B timing of the v2 CPU decoder or encoder against another git revision's.

    python -m prepkit.bench.cpu_ab out/evalsets --rev HEAD~1 --limit 12 --repeat 5 [--encode]

This VM's speed drifts by 20-30% between runs, so a change to the kernels is measured here:
`prepkit/lossless/cpu_v2.py` of `--rev` is loaded beside the working tree's, both run on one
thread, interleaved image by image, and each set reports the ratio of summed times (new / old;
below 1 is faster). Decoding: both decode the same validated plans (streams from the working
tree's encoder) and must return the same pixels; the old module must accept the current plans
(true while the bitstream does not change). `--encode`: both encode the same images and must
write the same bytes. `--own-streams`, for a change of the bitstream: each revision decodes
the streams its own encoder writes (both must return the images), and encoders may differ.

Run a null comparison too (`--rev HEAD` on an unchanged tree): on 2026-11-26 it gave masks
0.689 and rendered images 0.982 (the loaded copy decodes small images slower than the
installed module; cause not found), so a ratio means something only against that.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numba
import numpy as np

from prepkit.bench.lossless_eval import load_sets
from prepkit.lossless import cpu_v2, hostplan
from prepkit.parallel import keeps_numba_threads

MODULE = "prepkit/lossless/cpu_v2.py"


def _git_show(root: Path, rev: str, path: str) -> str | None:
    shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def _import_source(name: str, source: str, folder: Path) -> ModuleType:
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_revision(rev: str) -> ModuleType:
    """cpu_v2 as it was at git revision `rev`, imported under another name, with the
    `prepkit.lossless` helper modules it imports (med_simd, rans_avx2, ...) also taken from
    `rev` where they differ from the working tree's."""
    root = Path(__file__).resolve().parents[2]
    source = _git_show(root, rev, MODULE)
    if source is None:
        raise SystemExit(f"{MODULE} does not exist at {rev}")
    folder = Path(tempfile.mkdtemp(prefix="cpu_ab_"))
    lines = []
    for line in source.splitlines():
        names = line.removeprefix("from prepkit.lossless import ").split(", ")
        if not line.startswith("from prepkit.lossless import ") or " as " in line:
            lines.append(line)
            continue
        kept = []
        for name in names:
            path = f"prepkit/lossless/{name}.py"
            old_helper = _git_show(root, rev, path)
            if old_helper is not None and old_helper != (root / path).read_text():
                _import_source(f"ab_old_{name}", old_helper, folder)
                lines.append(f"import ab_old_{name} as {name}")
            else:
                kept.append(name)
        if kept:
            lines.append("from prepkit.lossless import " + ", ".join(kept))
    # (the helpers are in sys.modules already, so `import ab_old_...` finds them there)
    return _import_source("cpu_v2_ab_old", "\n".join(lines) + "\n", folder)


def _decode(module: ModuleType, plan, items: np.ndarray) -> tuple[np.ndarray, float]:
    """module.decode_items over the plan: (the pixels, seconds); raises on a decode error."""
    out = np.empty(plan.total, np.uint8)
    errors = np.zeros(plan.work.shape[0], np.int64)  # (the library's dtype: one specialization)
    start = time.perf_counter()
    module.decode_items(plan, items, out, errors)
    seconds = time.perf_counter() - start
    if errors.any():
        raise RuntimeError(f"{module.__name__} reported decode errors {np.unique(errors)}")
    return out, seconds


def _decode_ab(name: str, images: list[np.ndarray], old: ModuleType, repeat: int, fast_decode: bool,
               own_streams: bool) -> None:
    plans = []
    for image in images:
        plan = hostplan.plan_buffers([cpu_v2.encode(image, fast_decode=fast_decode)], None)
        items = np.arange(plan.work.shape[0])
        if own_streams:
            old_plan = hostplan.plan_buffers([old.encode(image, fast_decode=fast_decode)], None)
            old_items = np.arange(old_plan.work.shape[0])
            for module, p, i in ((cpu_v2, plan, items), (old, old_plan, old_items)):
                if not np.array_equal(_decode(module, p, i)[0], image.reshape(-1)):
                    raise RuntimeError(f"{name}: {module.__name__} does not return the image")
        else:
            old_plan, old_items = plan, items
            if not np.array_equal(_decode(cpu_v2, plan, items)[0], _decode(old, plan, items)[0]):
                raise RuntimeError(f"{name}: the two decoders disagree")
        plans.append(((plan, items), (old_plan, old_items)))
    totals = {"new": 0.0, "old": 0.0}
    for _ in range(repeat):
        for new_pair, old_pair in plans:
            for label, module, (plan_r, items_r) in (("old", old, old_pair), ("new", cpu_v2, new_pair)):
                totals[label] += _decode(module, plan_r, items_r)[1]
    _report(name, len(images), "decode", totals, repeat)


def _encode_ab(name: str, images: list[np.ndarray], old: ModuleType, repeat: int, fast_decode: bool,
               own_streams: bool) -> None:
    for image in images:  # (also compiles both before the timing)
        new_bytes, old_bytes = cpu_v2.encode(image, fast_decode=fast_decode), old.encode(image, fast_decode=fast_decode)
        if not own_streams and new_bytes != old_bytes:
            raise RuntimeError(f"{name}: the two encoders write different bytes")
    totals = {"new": 0.0, "old": 0.0}
    for _ in range(repeat):
        for image in images:
            for label, module in (("old", old), ("new", cpu_v2)):
                start = time.perf_counter()
                module.encode(image, fast_decode=fast_decode)
                totals[label] += time.perf_counter() - start
    _report(name, len(images), "encode", totals, repeat)


def _report(name: str, n_images: int, what: str, totals: dict[str, float], repeat: int) -> None:
    print(f"{name:10s} {n_images:3d} images  {what} old {1e3 * totals['old'] / repeat:9.1f} ms  "
          f"new {1e3 * totals['new'] / repeat:9.1f} ms  new/old {totals['new'] / totals['old']:.3f}")


@keeps_numba_threads
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evalsets", type=Path)
    parser.add_argument("--rev", default="HEAD", help="git revision of the old kernels (default HEAD)")
    parser.add_argument("--sets", nargs="*", default=None)
    parser.add_argument("--limit", type=int, default=12, help="images per set")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fast-decode", action="store_true", help="encode with fast_decode=True")
    parser.add_argument("--encode", action="store_true", help="time the encoders instead of the decoders")
    parser.add_argument("--own-streams", action="store_true",
                        help="each revision codes its own streams (for a change of the bitstream)")
    args = parser.parse_args(argv)

    numba.set_num_threads(1)
    old = load_revision(args.rev)
    for name, images in load_sets(args.evalsets, args.sets, args.limit).items():
        (_encode_ab if args.encode else _decode_ab)(name, images, old, args.repeat, args.fast_decode,
                                                    args.own_streams)


if __name__ == "__main__":
    main()
