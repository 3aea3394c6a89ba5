"""scripts/check itself: a failed stage's reason is repeated at the end of
the output, where a CI page that shows only the tail still has it."""
import os
import pathlib
import subprocess

TOP = pathlib.Path(__file__).resolve().parents[2]
CHECK = TOP / "scripts" / "check"


def check(tmp_path, *stages):
    return subprocess.run([CHECK, *stages], capture_output=True, text=True,
                          env=dict(os.environ, SD_CHECK_RESULTS=str(tmp_path)),
                          timeout=600)


def test_failed_stage_is_explained_at_the_end(tmp_path):
    r = check(tmp_path, "nosuch")
    out = r.stdout.splitlines()
    assert r.returncode == 1, r
    assert out[-1] == "check: 0 passed, 1 failed", out
    why = out.index("=== why nosuch failed (build/test-results/nosuch.log) ===")
    assert "check: unknown stage 'nosuch'" in out[why + 1:], out
    assert (tmp_path / "nosuch.log").read_text() == \
        "check: unknown stage 'nosuch'\n"
    assert (tmp_path / "stages.txt").read_text() == "nosuch fail\n"


def test_passed_stage_is_not_repeated(tmp_path):
    r = check(tmp_path, "style")
    assert r.returncode == 0, r
    assert not any(line.startswith("=== why") for line in r.stdout.splitlines())
    assert r.stdout.splitlines()[-1] == "check: 1 passed, 0 failed"
    assert (tmp_path / "style.log").exists()
