"""Module hygiene: import boundaries, and numba's disk cache following inlined modules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prepkit import jitcache
from prepkit.jitcache import dependency_digest, drop_if_stale

REPO = Path(__file__).resolve().parent.parent


def _run(code: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd or REPO), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_encoder_and_store_keep_their_import_boundaries() -> None:
    out = _run(
        "import sys, numpy as np\n"
        "from prepkit import lossless\n"
        "import prepkit.store.writer, prepkit.store.convert, prepkit.store.reader, prepkit.store.verify\n"
        "data = lossless.encode(np.zeros((5, 7, 3), np.uint8))\n"
        "assert lossless.decode(data).shape == (5, 7, 3)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('prepkit.lossless.reference', 'prepkit.ingest'))))"
    )
    assert out == "[]", f"production code imported {out}"


def test_drop_if_stale_removes_only_entries_of_other_digests(tmp_path: Path) -> None:
    for name in ("k-1.py311.nbi", "k-1.py311.1.nbc", "k-1.py311.2.nbc", "other-3.py311.nbi"):
        (tmp_path / name).write_bytes(b"x")
    assert drop_if_stale(tmp_path, "k-1.py311", "aaa")  # no stamp yet: unknown provenance, dropped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k-1.py311.deps", "other-3.py311.nbi"]
    (tmp_path / "k-1.py311.nbi").write_bytes(b"x")
    assert not drop_if_stale(tmp_path, "k-1.py311", "aaa")  # same digest: kept
    assert (tmp_path / "k-1.py311.nbi").exists()
    assert drop_if_stale(tmp_path, "k-1.py311", "bbb")  # dependency changed: dropped
    assert not (tmp_path / "k-1.py311.nbi").exists()


def test_digest_covers_the_build_switch() -> None:
    """cpu_v2 passes its AVX2 switch as `extra`: turning it changes the digest, and so drops the
    cached kernels compiled with the other setting."""
    assert dependency_digest([jitcache], "avx2=True") != dependency_digest([jitcache], "avx2=False")
    assert dependency_digest([jitcache]) == dependency_digest([jitcache], "")


def test_cached_kernel_sees_an_edit_of_an_inlined_module(tmp_path: Path) -> None:
    """The bug: a cache=True kernel kept the machine code of a helper module edited since."""
    (tmp_path / "dep_mod.py").write_text("def step(x):\n    return x + 1\n")
    (tmp_path / "kernel_mod.py").write_text(textwrap.dedent("""
        from numba import njit
        import dep_mod
        from prepkit.jitcache import guard_disk_cache
        step = njit(inline="always", cache=True)(dep_mod.step)

        @njit(cache=True)
        def kernel(x):
            return step(x) * 10

        guard_disk_cache(globals(), (dep_mod,))
    """))
    call = "import kernel_mod; print(kernel_mod.kernel(1))"
    assert _run(call, tmp_path) == "20"
    assert _run(call, tmp_path) == "20"  # from the cache
    (tmp_path / "dep_mod.py").write_text("def step(x):\n    return x + 2\n")
    assert _run(call, tmp_path) == "30"


def test_a_kernel_imported_by_another_guarded_module_keeps_its_cache(tmp_path: Path) -> None:
    """The bug: augment.colour imports augment.cpu's cached _emit_row and guarded its own
    namespace with its own digest, so each process dropped the entries cpu had recorded."""
    (tmp_path / "helper_mod.py").write_text("def step(x):\n    return x + 1\n")
    (tmp_path / "owner_mod.py").write_text(textwrap.dedent("""
        from numba import njit
        import helper_mod
        from prepkit.jitcache import guard_disk_cache

        @njit(cache=True)
        def kernel(x):
            return x * 10

        guard_disk_cache(globals(), (helper_mod,))
    """))
    (tmp_path / "user_mod.py").write_text(textwrap.dedent("""
        import owner_mod
        from owner_mod import kernel
        from prepkit.jitcache import guard_disk_cache

        guard_disk_cache(globals(), (owner_mod,))
    """))
    call = "import user_mod; print(user_mod.kernel(2), len(user_mod.kernel.stats.cache_hits))"
    assert _run(call, tmp_path) == "20 0"  # compiled, and saved
    assert _run(call, tmp_path) == "20 1"  # loaded from the cache: the second guard left it


def test_every_module_whose_cached_kernels_use_another_module_guards_them() -> None:
    """numba keys a cached kernel on its own file only: a module with cache=True kernels that
    imports prepkit code (functions its kernels inline or call, constants they freeze) must
    call guard_disk_cache, or an edit there leaves its cached machine code stale."""
    import ast

    package = REPO / "prepkit"
    unguarded = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        if "cache=True" not in source:
            continue
        imported = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prepkit"):
                imported |= {node.module} if node.module != "prepkit" else {a.name for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("prepkit")}
        if imported - {"prepkit.errors", "prepkit.jitcache"} and "guard_disk_cache(globals()" not in source:
            unguarded.append(str(path.relative_to(REPO)))
    assert unguarded == [], unguarded


def test_v2_encoder_does_not_import_the_numpy_reference() -> None:
    out = _run(
        "import sys, numpy as np\n"
        "from prepkit import lossless\n"
        "image = (np.arange(30 * 40 * 3) % 251).astype(np.uint8).reshape(30, 40, 3)\n"
        "assert (lossless.decode(lossless.encode(image, version=2)) == image).all()\n"
        "print(sorted(m for m in sys.modules if m.startswith('prepkit.lossless.reference')))"
    )
    assert out == "[]", f"the v2 encoder imported {out}"
