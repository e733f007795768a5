"""Static report of the lossless CUDA kernels for sm_90: ptxas resources and SASS loop sizes.

    python -m prepkit.bench.ptxas_report            (no GPU needed)

Compiles the kernels to PTX with numba for compute capability 9.0, runs `ptxas -arch=sm_90 -v`
(registers, shared memory, spills per kernel) and, when nvdisasm is installed
(`pip install nvidia-cuda-nvdisasm`), disassembles the cubin and measures the steady loops
of the v2 decode kernel. Loops are the backward branches of the SASS; each is matched to a
`# sass: NAME` marker in prepkit/lossless/cuda_v2.py through the line info. A loop's size
is its static instruction count (every branch of the body counted, so an upper bound on the
path one lane runs per iteration), less its nested loops marked `rare` (run once per plane,
not per symbol). Dividing by the pixel-channels one lane decodes per iteration gives the
instructions per decoded pixel-channel of each pass; the total is their sum.
"""

from __future__ import annotations

import argparse
import glob
import inspect
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# pixel-channels one lane handles per source iteration of each marked loop (output: 4 pixels)
PER_ITERATION = {"rans": 1, "rows": 4, "columns": 4, "med": 2}
# The MED wavefront decodes two pixels per lane and step and runs 32 + 32 + 31 steps for a
# 64x64 tile: 190 pixel slots for the 128 pixels of a lane (lanes idle on the ramps), so its
# per-slot figure is scaled by 190 / 128.
MED_SLOTS_PER_PIXEL = 2 * (32 + 32 + 31) / 128
# An instruction each source iteration runs exactly `count` times (in the C = 4 path for the
# output; rans: the symbol stored to its plane row and twice to the context ring): ptxas
# unrolls loops, and this tells by how much.
SIGNATURE = {
    "rans": ("STS.U8", 3), "rows": ("STS", 1), "columns": ("STS", 1), "output": ("LDS", 4), "rare": ("", 1),
    "med": ("STS.U16", 1), "output1": ("LDS", 1),
}


@dataclass
class Loop:
    start: int  # index of the first instruction (the branch target)
    end: int  # index of the backward branch
    lines: list[int]  # source line of every instruction in [start, end]
    ops: list[str]  # opcode of every instruction in [start, end] (predicate dropped)

    @property
    def size(self) -> int:
        return self.end - self.start + 1


def find_tool(name: str) -> str | None:
    """A CUDA tool from the environment (PTXAS / NVDISASM) or an nvidia-* wheel on sys.path."""
    env = os.environ.get(name.upper())
    if env:
        return env
    for root in sys.path:
        hits = sorted(glob.glob(os.path.join(root, "nvidia", "*", "bin", name)))
        if hits:
            return hits[0]
    return None


def compile_ptx() -> dict[str, str]:
    """PTX of every lossless kernel for sm_90 (with line info), by name."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise SystemExit("Expected a real numba CUDA target. Got NUMBA_ENABLE_CUDASIM=1.")
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    class Target:
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: Target()  # no GPU here: name the target
    from prepkit.lossless import cuda as v1
    from prepkit.lossless import cuda_v2 as v2

    out = {}
    for label, module in (("v1 decode_kernel", v1), ("v2 decode_kernel", v2)):
        for function, signature in module.kernel_signatures():
            ptx, _ = cuda.compile_ptx(function, signature, cc=(9, 0), lineinfo=True)
            out[label] = ptx
    return out


def ptxas_resources(ptxas: str, ptx_path: str, cubin_path: str) -> dict[str, int]:
    """Registers, spill stores/loads, stack and static shared memory from ptxas -v."""
    result = subprocess.run([ptxas, "-arch=sm_90", "-v", ptx_path, "-o", cubin_path],
                            capture_output=True, text=True, check=True)
    text = result.stdout + result.stderr
    numbers = {
        "registers": r"Used (\d+) registers",
        "spill_stores": r"(\d+) bytes spill stores",
        "spill_loads": r"(\d+) bytes spill loads",
        "stack": r"(\d+) bytes stack frame",
        "smem": r"(\d+) bytes smem",
    }
    found = {}
    for key, pattern in numbers.items():
        m = re.search(pattern, text)
        found[key] = int(m.group(1)) if m else 0
    return found


def sass_loops(sass: str, source_file: str) -> list[Loop]:
    """Backward-branch loops of an `nvdisasm -c -g` listing, with each instruction's line."""
    instructions: list[int] = []  # source line per instruction (-1: another file)
    opcodes: list[str] = []
    labels: dict[str, int] = {}
    branches: list[tuple[int, str]] = []
    line = -1
    for raw in sass.splitlines():
        m = re.search(r'## File "([^"]+)", line (\d+)', raw)
        if m:
            line = int(m.group(2)) if os.path.basename(m.group(1)) == os.path.basename(source_file) else -1
            continue
        m = re.match(r"^\s*(\.L_x_\d+):", raw)
        if m:
            labels[m.group(1)] = len(instructions)
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", raw)
        if m:
            b = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", m.group(2))
            if b:
                branches.append((len(instructions), b.group(1)))
            instructions.append(line)
            words = m.group(2).split()
            opcodes.append(words[1] if words[0].startswith("@") and len(words) > 1 else words[0])
    loops = []
    for at, label in branches:
        target = labels.get(label)
        if target is not None and target <= at:
            loops.append(Loop(target, at, instructions[target : at + 1], opcodes[target : at + 1]))
    return loops


def markers(source_file: str) -> dict[str, tuple[int, int]]:
    """`# sass: NAME` markers of the source: NAME -> (first, last) line of the marked block."""
    with open(source_file) as handle:
        lines = handle.read().splitlines()
    found = {}
    for i, text in enumerate(lines):
        m = re.search(r"# sass: (\w+)", text)
        if not m:
            continue
        indent = len(text) - len(text.lstrip())
        last = i
        for j in range(i + 1, len(lines)):
            if lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) <= indent:
                break
            last = j
        found[m.group(1)] = (i + 1, last + 1)
    return found


def loop_for(loops: list[Loop], first: int, last: int, kernel: tuple[int, int]) -> Loop:
    """The largest loop closed by a branch of the marked line `first` whose instructions come
    (>= 90%) from source lines first..last, or from lines outside the kernel's body (inlined
    device functions, the def line). The branch rule keeps out an enclosing loop that ptxas
    filled with a peeled copy of the marked one."""
    def share(loop: Loop) -> float:
        ours = sum(1 for ln in loop.lines if first <= ln <= last or not kernel[0] < ln <= kernel[1])
        return ours / loop.size

    candidates = [loop for loop in loops if loop.lines[-1] == first and share(loop) >= 0.9]
    if not candidates:
        raise SystemExit(f"Expected a SASS loop for source lines {first}-{last}. Got none.")
    return max(candidates, key=lambda loop: loop.size)


def unroll(loop: Loop, name: str) -> int:
    """How many source iterations one pass of the SASS loop runs (ptxas unrolling)."""
    op, count = SIGNATURE[name]
    if not op:
        return 1
    return max(1, sum(1 for o in loop.ops if o == op) // count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="folder to keep the PTX, cubin and SASS in")
    args = parser.parse_args(argv)
    ptxas = find_tool("ptxas")
    if ptxas is None:
        raise SystemExit("Expected ptxas (pip install nvidia-cuda-nvcc-cu12, or set PTXAS). Got none.")
    nvdisasm = find_tool("nvdisasm")
    folder = args.keep or tempfile.mkdtemp(prefix="ptxas_report_")
    os.makedirs(folder, exist_ok=True)
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip()
    version = version.splitlines()[-1]
    import numba

    print(f"ptxas: {version}; numba {numba.__version__}")
    print()
    print("| kernel | registers | static smem (B) | stack (B) | spill stores/loads (B) |")
    print("|---|---|---|---|---|")
    cubins = {}
    for label, ptx in compile_ptx().items():
        name = label.replace(" ", "_")
        ptx_path = os.path.join(folder, name + ".ptx")
        with open(ptx_path, "w") as handle:
            handle.write(ptx)
        cubins[label] = os.path.join(folder, name + ".cubin")
        r = ptxas_resources(ptxas, ptx_path, cubins[label])
        print(f"| {label} | {r['registers']} | {r['smem']} | {r['stack']} | "
              f"{r['spill_stores']}/{r['spill_loads']} |")
    print()
    print("v2 dynamic shared memory per block: C * th * 64 bytes (16 KiB for a 64x64 RGBA tile).")
    if nvdisasm is None:
        print("nvdisasm not found (pip install nvidia-cuda-nvdisasm, or set NVDISASM): no SASS counts.")
        return 0
    nv_version = subprocess.run([nvdisasm, "--version"], capture_output=True, text=True).stdout.strip()
    sass = subprocess.run([nvdisasm, "-c", "-g", cubins["v2 decode_kernel"]], capture_output=True,
                          text=True, check=True).stdout
    with open(os.path.join(folder, "v2_decode_kernel.sass"), "w") as handle:
        handle.write(sass)
    from prepkit.lossless import cuda_v2

    source = inspect.getsourcefile(cuda_v2)
    assert source is not None
    loops = sass_loops(sass, source)
    marks = markers(source)
    body, first_line = inspect.getsourcelines(cuda_v2.decode_kernel.py_func)
    kernel = (first_line + 1, first_line + len(body) - 1)  # the def line counts as outside
    print()
    print(f"nvdisasm: {nv_version.splitlines()[-1]}")
    print()
    print("| v2 pass (loop) | SASS instructions per loop pass | unrolled | pixel-channels per lane "
          "and pass | instructions per pixel-channel |")
    print("|---|---|---|---|---|")
    rare = loop_for(loops, *marks["rare"], kernel)
    per_channel: dict[str, float] = {}
    for name in ("rans", "rows", "columns", "med", "output1", "output"):
        loop = loop_for(loops, *marks[name], kernel)
        size = loop.size
        if name == "rans" and loop.start <= rare.start and rare.end <= loop.end and rare is not loop:
            size -= rare.size
        k = unroll(loop, name)
        if name == "output1":  # the one-channel output loop: no colour transform
            per_channel["output C=1"] = size / (4 * k)
            print(f"| output, C=1 (interleaved write) | {size} | {k}x | {4 * k} | {size / (4 * k):.1f} |")
        elif name == "output":
            for c in (3, 4):
                per_channel[f"output C={c}"] = size / (4 * c * k)
            print(f"| output, C=3 and 4 (colour inverse + interleaved write) | {size} | {k}x | {4 * k} C | "
                  f"{size / (12 * k):.1f} (C=3), {size / (16 * k):.1f} (C=4) |")
        else:
            per_channel[name] = size / (PER_ITERATION[name] * k)
            print(f"| {name} | {size} | {k}x | {PER_ITERATION[name] * k} | {per_channel[name]:.1f} |")
    print(f"| (rans: plane change, once per plane, not counted) | {rare.size} | - | - |")
    base = per_channel["rans"] + per_channel["rows"] + per_channel["columns"]
    # MED planes skip the row pass (the MED loop undoes their zig-zag) and the column pass
    med = per_channel["rans"] + per_channel["med"] * MED_SLOTS_PER_PIXEL
    print()
    for c in (1, 3, 4):
        print(f"steady total, C={c} (all planes rANS-coded, gradient predictor): "
              f"{base + per_channel[f'output C={c}']:.1f} SASS instructions per decoded pixel-channel")
    for c in (1, 3, 4):
        print(f"steady total, C={c} (all planes rANS-coded, MED predictor: the wavefront's "
              f"{MED_SLOTS_PER_PIXEL:.2f} slots per pixel): {med + per_channel[f'output C={c}']:.1f} "
              "SASS instructions per decoded pixel-channel")
    print(f"(files in {folder})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
