"""The VM harness itself (tests/vm/run): it must pass a clean run, pass
through the command's status, and fail runs whose module misbehaves.

Each test boots a guest (about 12 s under TCG)."""
import pathlib
import subprocess

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]
RUN = TOP / "tests" / "vm" / "run"
SD_SOCKET = TOP / "build" / "user" / "tests" / "progs" / "sd_socket"


def kdir():
    kver = subprocess.run([TOP / "scripts" / "kver"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return f"/lib/modules/{kver}/build"


def broken_module(tmp_path_factory, mode):
    """Build af_sd.ko with SD_SELFTEST_BREAK=mode in a scratch folder:
    1 warns at load, 2 leaks every socket (which pins the module)."""
    src = tmp_path_factory.mktemp(f"break{mode}")
    for f in (TOP / "kernel").iterdir():
        if f.suffix in (".c", ".h") and not f.name.endswith(".mod.c") or f.name == "Kbuild":
            (src / f.name).symlink_to(f)
    subprocess.run(["make", "-s", "-C", kdir(), f"M={src}",
                    f"SD_UAPI={TOP / 'include' / 'uapi'}",
                    f"SD_VERSION_FILE={TOP / 'VERSION'}",
                    f"SD_SELFTEST_BREAK={mode}", "modules"],
                   check=True, capture_output=True)
    return src / "af_sd.ko"


def vm(*args, timeout=300):
    return subprocess.run([str(RUN), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=TOP)


@pytest.fixture(scope="module")
def warn_module(tmp_path_factory):
    return broken_module(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def leak_module(tmp_path_factory):
    return broken_module(tmp_path_factory, 2)


def test_clean_run_passes():
    r = vm("--", SD_SOCKET, "churn", "100")
    assert r.returncode == 0, r.stderr
    assert '"created": 100' in r.stdout
    assert "kernel log clean" in r.stderr


def test_command_status_passes_through():
    r = vm("--", "sh", "-c", "echo out; exit 7")
    assert r.returncode == 7
    assert "out" in r.stdout


def test_warn_in_module_fails_the_run(warn_module):
    r = vm("--module", warn_module, "--", "true")
    assert r.returncode != 0
    assert "splat" in r.stderr
    assert "deliberate warning" in r.stderr


def test_leaked_socket_fails_the_run(leak_module):
    r = vm("--module", leak_module, "--", SD_SOCKET, "churn", "1")
    assert r.returncode != 0
    assert "rmmod af_sd failed" in r.stderr


def test_missing_module_file_is_an_error():
    r = vm("--module", "/nonexistent/af_sd.ko", "--", "true", timeout=30)
    assert r.returncode == 2
    assert "no module" in r.stderr


def test_hung_guest_times_out():
    r = vm("--timeout", "25", "--", "sleep", "600", timeout=120)
    assert r.returncode != 0
    assert "timed out" in r.stderr
