"""prepkit.bench.compile_audit: its verdict on the compile reports (the cold compiles
themselves take minutes and run from `make compile-audit`)."""

from __future__ import annotations

import json

import pytest

from prepkit.bench import compile_audit


def _report(part: str, signatures: dict[str, list[list[str]]]) -> dict:
    return {"part": part, "seconds": 12.5, "compiles": sum(len(s) for s in signatures.values()),
            "own_seconds": {name: 1.0 + i for i, name in enumerate(signatures)}, "signatures": signatures}


def test_a_kernel_compiled_twice_fails_the_audit(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                  tmp_path) -> None:
    reports = {"decode": _report("decode", {"cpu_v2._decode_loop": [["int64", "Literal[int](0)"], ["int64", "int64"]],
                                            "cpu_v2._rans": [["int64"]]})}
    monkeypatch.setattr(compile_audit, "audit_part", lambda part: reports[part])
    out = tmp_path / "out" / "audit.json"  # a folder that does not exist yet
    assert compile_audit.main(["decode", "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "TWICE cpu_v2._decode_loop: 2 signatures" in printed
    assert "argument 1: Literal[int](0) | int64" in printed
    assert "argument 0" not in printed  # the same in both
    assert "compiled for more than one signature: cpu_v2._decode_loop" in printed
    assert json.loads(out.read_text())[0]["part"] == "decode"


def test_expected_pairs_and_single_signatures_pass(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    reports = {"encode": _report("encode", {"runs.sure": [["int64", "int64"], ["array(int64, 1d, C)", "int64"]],
                                            "cpu_v2._encode_all": [["array(uint8, 3d, C)"]]})}
    monkeypatch.setattr(compile_audit, "audit_part", lambda part: reports[part])
    assert compile_audit.main(["encode", "--top", "1"]) == 0
    printed = capsys.readouterr().out
    assert "== encode: 12.5 s cold, 3 compiles" in printed
    assert "(expected) runs.sure: 2 signatures" in printed
    # --top 1: only the function with the most own time is listed
    assert "cpu_v2._encode_all" in printed and printed.count(" s  ") == 1


def test_a_failed_part_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    class Done:
        returncode = 1
        stdout = ""
        stderr = "Traceback: boom"

    monkeypatch.setattr(compile_audit.subprocess, "run", lambda *a, **k: Done())
    with pytest.raises(RuntimeError, match="part 'decode' failed:\nTraceback: boom"):
        compile_audit.audit_part("decode")
