"""Compiled functions call each other without literal constants.

numba types a constant argument as a literal (``Literal[int](0)``, ``Literal[bool](True)``)
and compiles the callee once more for it: a decoder loop called with ``0, 1`` from one caller
and with variables from another was compiled twice, its callees with it. Before stop 49 the
cold compile of the CPU decoders' entry points took 337 s on the dev VM (``make
compile-audit``), 142 s after every such call passed ``np.int64(...)`` or ``np.bool_(...)``
instead (docs/BENCHMARKS.md, "Cold compile without literal specializations"). This test reads the source: a call from one
``@njit`` function to another that is compiled on its own (not ``inline="always"``, whose
body is typed in the caller anyway) must not pass a number or bool literal.
"""

from __future__ import annotations

import ast
from pathlib import Path

import prepkit

ROOT = Path(prepkit.__file__).parent


def _jit_decorator(decorator: ast.expr) -> tuple[bool, bool]:
    """(is an njit decorator, with inline="always")."""
    if isinstance(decorator, ast.Name):
        return decorator.id == "njit", False
    if isinstance(decorator, ast.Call):
        func = decorator.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "njit":
            inline = any(k.arg == "inline" and isinstance(k.value, ast.Constant) and k.value.value == "always"
                         for k in decorator.keywords)
            return True, inline
    return False, False


def _compiled_functions() -> tuple[set[str], list[tuple[Path, ast.FunctionDef]]]:
    """(names of njit functions compiled on their own, every njit function with its file)."""
    separate: set[str] = set()
    bodies = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                is_jit, inline = _jit_decorator(decorator)
                if is_jit:
                    bodies.append((path, node))
                    if not inline:
                        separate.add(node.name)
    return separate, bodies


def _literal_calls(separate: set[str], bodies: list[tuple[Path, ast.FunctionDef]]) -> list[str]:
    found = []
    for path, function in bodies:
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else None
            if callee not in separate:
                continue
            values = [a for a in node.args] + [k.value for k in node.keywords]
            literals = [ast.unparse(v) for v in values
                        if isinstance(v, ast.Constant) and isinstance(v.value, (bool, int, float))]
            if literals:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {function.name} calls {callee} with {literals}")
    return found


def test_the_scan_sees_the_decoder() -> None:
    separate, bodies = _compiled_functions()
    assert {"_decode_loop", "_rans", "_decode_item", "_decode_many", "_validate_fill"} <= separate
    assert "_rans_step" not in separate  # inline="always"
    assert len(bodies) > 150


def test_the_scan_finds_a_literal_argument() -> None:
    source = ("@njit(cache=True)\ndef callee(a, b):\n    return a + b\n\n"
              "@njit(cache=True)\ndef caller(x):\n    return callee(x, 0) + callee(x, np.int64(0))\n")
    bodies = [(ROOT / "example.py", node) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)]
    found = _literal_calls({"callee"}, bodies)
    assert found == ["example.py:7 caller calls callee with ['0']"]


def test_no_compiled_call_passes_a_literal() -> None:
    separate, bodies = _compiled_functions()
    found = _literal_calls(separate, bodies)
    assert not found, "pass np.int64(...) / np.bool_(...) instead:\n" + "\n".join(found)


def test_a_read_only_image_encodes_with_the_kernels_a_writable_one_compiled() -> None:
    """Images from Pillow are read-only arrays (np.asarray of a PIL image: what ingest
    passes), and numba compiles a kernel again for a read-only argument: every encoder
    kernel a second time, 35 s on the first store written after `prepkit warmup`. The
    encoders take a writable copy (lossless.format.prepare), so no kernel gains a signature."""
    import numpy as np

    from prepkit.lossless import cpu_v2

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 72, 3), dtype=np.uint8)
    image[:, :30] = image[0, 0]  # constant and palette-like tiles too
    writable = cpu_v2.encode(image)
    kernels = [cpu_v2._choose_symbols_all, cpu_v2._palettes_all, cpu_v2._encode_all]
    signatures = [len(kernel.signatures) for kernel in kernels]
    read_only = image.copy()
    read_only.flags.writeable = False
    assert cpu_v2.encode(read_only) == writable
    assert [len(kernel.signatures) for kernel in kernels] == signatures
