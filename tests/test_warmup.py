"""prepkit.warmup: the parts compile into numba's disk cache from spawned processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prepkit import jitcache, warmup
from prepkit.lossless import mask_encoder, single


def _cache_files(dispatcher: object) -> list[Path]:
    entry = jitcache.cache_entry(dispatcher)
    assert entry is not None, "expected a cache=True dispatcher"
    folder, prefix = entry
    return [*folder.glob(f"{prefix}.nbi"), *folder.glob(f"{prefix}.*.nbc")]


def test_parts_fill_the_cache_of_the_decoder_and_the_encoder() -> None:
    """With the entries of a decoder and an encoder kernel deleted, warm() compiles them again
    (in its own processes) and writes them back to the disk cache."""
    kernels = (single._decode_many, mask_encoder._stream)
    for kernel in kernels:
        for path in _cache_files(kernel):
            path.unlink()
        assert not _cache_files(kernel)
    results = warmup.warm(["decode", "encode"])
    assert sorted(result.name for result in results) == ["decode", "encode"]
    assert all(result.error is None and result.seconds > 0 for result in results), results
    for kernel in kernels:
        names = sorted(path.suffix for path in _cache_files(kernel))
        assert names[-1] == ".nbi" and ".nbc" in names, names


def test_unknown_parts_and_job_counts_are_refused() -> None:
    with pytest.raises(ValueError, match=r"parts among \['augment', 'decode', 'encode', 'reader'\]. Got \['decoder'\]"):
        warmup.warm(["decode", "decoder"])
    with pytest.raises(ValueError, match="Got \\[\\]"):
        warmup.warm([])
    with pytest.raises(ValueError, match="jobs >= 1"):
        warmup.warm(["encode"], jobs=0)


def test_a_failing_part_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("no compiler")

    monkeypatch.setitem(warmup.PARTS, "decode", broken)
    result = warmup.run_part("decode")
    assert result.name == "decode" and result.error == "RuntimeError: no compiler"


def _die(name: str) -> warmup.PartResult:
    """A part whose process dies (as a crash in compiled code would end it)."""
    os._exit(3)


def test_a_dead_part_process_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "run_part", _die)
    seen: list[warmup.PartResult] = []
    results = warmup.warm(["reader"], on_done=seen.append)
    assert results == seen and len(results) == 1
    assert results[0].name == "reader" and results[0].error is not None and "BrokenProcessPool" in results[0].error


def test_the_parts_images_cover_every_channel_count_and_a_mask() -> None:
    images = warmup._images()
    assert sorted({image.shape[2] for image in images}) == [1, 3, 4]
    mask = images[-1]
    assert mask.shape[2] == 1 and 1 < len(set(mask.ravel().tolist())) <= 4
    assert all(image.shape[0] % 16 and image.shape[1] % 16 for image in images)  # partial edge tiles


def test_cli_runs_the_named_parts_and_refuses_unknown_ones() -> None:
    from click.testing import CliRunner

    from prepkit.cli import _register, cli

    _register()
    result = CliRunner().invoke(cli, ["warmup", "--parts", "reader", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "compiling reader into numba's cache" in result.output
    assert result.output.strip().splitlines()[-1].startswith("reader: ")
    result = CliRunner().invoke(cli, ["warmup", "--parts", "encode,jpeg"])
    assert result.exit_code == 2 and "Got ['jpeg']" in result.output


def test_module_entry_refuses_an_unknown_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert warmup.main(["decode", "gpu"]) == 2
    assert "Got ['gpu']" in capsys.readouterr().err


def test_the_augment_part_runs_the_colour_stage_and_the_channel_ops() -> None:
    """The augment part (in this process: its kernels load from the cache `make test`'s
    warm-up filled) runs its pipelines without an error."""
    result = warmup.run_part("augment")
    assert result.name == "augment" and result.error is None, result


def test_the_parts_reach_the_kernels_a_user_calls_first() -> None:
    """In a fresh process, the parts call (and so compile, or load) the kernels behind
    lossless.decode of a whole stream, palette tiles, images of one tile, small_encoder's short path, table sets
    per tile class, RandomErasing, masks, CutMix, MixUp and
    16-bit outputs:
    each had compiled on its first use after a warm-up, 2-6 s each on the dev VM."""
    code = (
        "from prepkit import warmup\n"
        "for part in ('encode', 'decode', 'augment'):\n"
        "    warmup.PARTS[part]()\n"
        "from prepkit.lossless import single, cpu_v2, small_encoder, table_sets\n"
        "from prepkit.augment import batch, erasing, colour, cpu\n"
        "kernels = {'decode_one': single._decode_one, 'palette': cpu_v2._palette_symbols_all,\n"
        "           'small': small_encoder._all_tiles, 'table_sets': table_sets._propose_compiled,\n"
        "           'erase': erasing._erase_kernel, 'mask': cpu._mask_kernel, 'mask_warp': colour._mask_warp_kernel,\n"
        "           'mixup': batch._mixup_cpu, 'cutmix': batch._cutmix_cpu, 'augment': cpu._augment_kernel}\n"
        "print(' '.join(f'{name}={len(kernel.signatures)}' for name, kernel in kernels.items()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    counts = dict(item.split("=") for item in done.stdout.split())
    assert all(int(n) >= 1 for n in counts.values()), counts
    assert int(counts["cutmix"]) >= 2, counts  # float32 and uint8 batches
    assert int(counts["augment"]) >= 3, counts  # float32, 16-bit (float16, bfloat16) and uint8 out
